"""Calibrate a remote decision model on memsift's training data, as the embedded heads are.

Usage (the model configured as for the hook, `MEMSIFT_DECISION_*`):

    python training/calibrate_remote.py [--messages 300] [--pairs 300]

Asks the remote model the `genre` question on a stratified sample of the labelled
messages (`data/genre/`) and the `note_answers` question on a sample of judged (message,
note) pairs (`data/pairs/`), then fits a temperature for the genre probabilities (Guo et
al., "On Calibration of Modern Neural Networks", 2017) and Platt's (a, b) on the log-odds
of the yes/no answers (Platt, "Probabilistic Outputs for Support Vector Machines", 1999),
and writes them to `<memsift home>/calibration/<model>.json`, which `load_model` applies.
It prints accuracy, pair AUC, the negative log-likelihood before and after, and the cost.
The cascade's thresholds then hold for that model as for the embedded one.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "training"))

from train_heads import fit_temperature, read  # noqa: E402


def fit_platt(p: list[float], y: list[int]) -> tuple[float, float]:
    """(a, b) minimising the log-loss of sigmoid(a * logit(p) + b), by gradient descent."""
    x = [math.log(min(max(v, 1e-6), 1 - 1e-6) / (1 - min(max(v, 1e-6), 1 - 1e-6))) for v in p]
    a, b = 1.0, 0.0
    for _ in range(3000):
        ga = gb = 0.0
        for xi, yi in zip(x, y):
            q = 1 / (1 + math.exp(-(a * xi + b)))
            ga += (q - yi) * xi
            gb += q - yi
        a -= 0.5 * ga / len(x)
        b -= 0.5 * gb / len(x)
    return a, b


def main() -> None:
    import numpy as np

    from memsift.classifiers import Request, load_question
    from memsift.classifiers.remote import FallbackModel, load_model
    from memsift.config import memsift_home

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--pairs", type=int, default=300)
    args = parser.parse_args()
    model = load_model()
    if not isinstance(model, FallbackModel):
        sys.exit("no remote decision model configured (set MEMSIFT_DECISION_API and the rest)")
    remote, rng = model.remote, random.Random(0)

    genre_q = load_question("genre").question
    options = genre_q.options()
    messages = read("genre")
    rng.shuffle(messages)
    logits, labels = [], []
    for m in messages[: args.messages]:
        a = remote.decide(Request({"message": m["text"]}, {"genre": genre_q}))["genre"]
        logits.append([math.log(max(a.probabilities[o], 1e-9)) for o in options])
        labels.append(options.index(m["genre"]))
    z, y = np.array(logits), np.array(labels)
    temperature = fit_temperature(z, y)

    note_q = load_question("note_answers")
    rows = read("pairs")
    notes = {r["id"]: r for r in rows if r["type"] == "note"}
    pairs = [(q["text"], notes[n]) for q in rows if q["type"] == "query"
             for n in q.get("answers", []) + q.get("near", []) if n in notes]
    rng.shuffle(pairs)
    p, t = [], []
    for text, note in pairs[: args.pairs]:
        state = {"message": text, "notes": [{"id": note["id"], "date": note["date"], "kind": note["kind"], "text": note["text"]}]}
        a = remote.decide(Request(state, {"note_answers.0": note_q.for_item(0)}))["note_answers.0"]
        p.append(a.noul)
        t.append(int(any(note["id"] in q.get("answers", []) for q in rows if q["type"] == "query" and q["text"] == text)))
    a_b = fit_platt(p, t)

    from sklearn.metrics import roc_auc_score

    def nll(zz):
        zz = zz - zz.max(1, keepdims=True)
        return float(-np.mean(zz[np.arange(len(y)), y] - np.log(np.exp(zz).sum(1))))

    print(f"{remote.name}: genre accuracy {np.mean(z.argmax(1) == y):.3f}, NLL {nll(z):.3f} -> {nll(z / temperature):.3f} "
          f"(temperature {temperature:.2f}); note pairs AUC {roc_auc_score(t, p) if len(set(t)) > 1 else float('nan'):.3f}, "
          f"Platt a={a_b[0]:.2f} b={a_b[1]:.2f}; {remote.usage.input_tokens:,} input tokens, ${remote.usage.cost_usd:.4f}")
    out = memsift_home() / "calibration" / f"{remote.name.replace(':', '-').replace('/', '_')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"temperature": {"genre": temperature}, "platt": {"note_answers": a_b, "passage_answers": a_b}},
                              indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
