"""Each stage of the cascade switched off in turn, on the same conversations.

Usage: python -m memsift.eval.ablation eval/conversations/

Prints a Markdown table of the FORMAT.md figures per variant. A stage is "off" when it
lets everything through: a gate or judge with threshold 0, the topic gate never stopping,
no ledger, notes written without supersession links, no passage backend.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from ..config import Settings
from ..recall import Recaller
from .replay import Figures, conversation_paths, conversation_stores, load_conversation, replay_turns, score

#: name -> (settings changes, supersession links, passage tier, ledger)
VARIANTS = {
    "shipped": ({}, True, True, True),
    "genre gate off": ({"lookup_p": 0.0}, True, True, True),
    "note judge off (best note always)": ({"note_threshold": 0.0}, True, True, True),
    "passage judge off (best passage always)": ({"passage_threshold": 0.0}, True, True, True),
    "topic gate off": ({"topic_none_p": 1.01}, True, True, True),
    "already-said check off": ({"already_said": 1.01}, True, True, True),
    "ledger off": ({}, True, True, False),
    "supersession links off": ({}, False, True, True),
    "passage tier off": ({}, True, False, True),
}


def main(paths: list[str]) -> None:
    from ..classifiers.embedded import EmbeddedChoiceModel

    model = EmbeddedChoiceModel()
    totals = {name: Figures(name) for name in VARIANTS}
    for path in conversation_paths(paths):
        conv = load_conversation(path)
        for link in (True, False):
            with conversation_stores(conv, model.encoder, link_supersession=link) as (notes, backend):
                for name, (changes, links, passages, ledger) in VARIANTS.items():
                    if links != link:
                        continue
                    settings = replace(Settings(), **changes)
                    recaller = Recaller(model, model.encoder, notes, backend if passages else None, settings)
                    lines = replay_turns(conv, recaller, name, use_ledger=ledger)
                    totals[name].add(score(conv, lines, name))
    print("| variant | pasted | characters | pasted for nothing | found | wrong |")
    print("| --- | --- | --- | --- | --- | --- |")
    for f in totals.values():
        print(f"| {f.name} | {f.pasted}/{f.turns} | {f.chars:,} | {f.pasted_for_nothing}/{f.quiet} "
              f"| {f.found}/{f.recall_turns} | {f.wrong} |")


if __name__ == "__main__":
    main(sys.argv[1:] or ["eval/conversations"])
