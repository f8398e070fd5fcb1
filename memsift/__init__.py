"""memsift: memory for coding agents that decides before it searches.

Modules, one concept each (imports point down this list, never up):

- `cli`, `server`, `hook`, `client`: entry points (the `memsift` command; the warm server;
  the hosts' hooks; the prompt hook's standard-library client of the server);
- `eval` (folder `eval/`): the replay harness and the test conversations;
- `recall`: the cascade (genre, notes, topic, passages, format);
- `notes`, `supersession`, `ledger`, `transcript`: the project's notes, which note replaces
  which, what a session already got, what the conversation already holds;
- `backends` (folder `backends/`): passage stores behind `PassageBackend`;
- `classifiers` (folder `classifiers/`): the decision models behind `ChoiceModel`;
- `prompts` (folder `prompts/`): the decision questions as data;
- `config`: paths and the cascade's numbers.
"""

__version__ = "0.1.0"
