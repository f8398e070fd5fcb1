"""The replay harness (`memsift eval`) and the test conversations it runs on (`conversations/`)."""
