"""The decision questions memsift asks, as data: one JSON file per question (System One shapes)."""
