"""False hits of `memsift.injection.find` on ordinary developer notes and messages.

Usage: python bench/injection_false_hits.py [--show]

Counts the stored items (notes and passages) of the dev conversations
(`eval/conversations/*.json`, or `$MEMSIFT_EVAL_DIR`), their user turns, and the training texts
(`training/data/*/*.jsonl`: notes, exchanges, messages in en/fr/de/es/zh) that `find` flags.
Each text is given with its tier (a stored passage as "passage", all else as "note").
None of them is an injection but the conversation items planted as such (6 on 2026-11),
so every other flag is a false hit. `--show` prints each one.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from memsift.injection import find

ROOT = Path(__file__).resolve().parent.parent


def corpora() -> dict[str, list[tuple[str, str]]]:
    """(text, tier) by corpus name: the tier `find` is given, "passage" for a stored
    passage, "note" for everything else (notes, messages)."""
    out: dict[str, list[tuple[str, str]]] = {"conversation items": [], "conversation turns": [], "training texts": []}
    folder = Path(os.environ.get("MEMSIFT_EVAL_DIR", ROOT / "eval" / "conversations"))
    for path in sorted(folder.glob("*.json")):
        conv = json.loads(path.read_text(encoding="utf-8"))
        out["conversation items"] += [(x["text"], "note") for x in conv.get("notes", [])]
        out["conversation items"] += [(x["text"], "passage") for x in conv.get("passages", [])]
        out["conversation turns"] += [(t[k], "note") for t in conv.get("turns", []) for k in ("user", "assistant") if t.get(k)]
    for path in sorted((ROOT / "training" / "data").glob("*/*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            tier = "passage" if row.get("type") == "passage" else "note"
            out["training texts"] += [(row[k], tier) for k in ("text", "user", "assistant") if isinstance(row.get(k), str)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--show", action="store_true", help="print every flagged text")
    args = parser.parse_args()
    for name, texts in corpora().items():
        hits = [(t, f) for t, tier in texts if (f := find(t, tier))]
        print(f"{name}: {len(hits)} flagged of {len(texts)} ({100 * len(hits) / max(len(texts), 1):.2f} %)")
        if args.show:
            for t, f in hits:
                print(f"  {f.reason}\n    {t[:200]}")


if __name__ == "__main__":
    main()
