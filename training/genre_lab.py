"""Compare genre heads on out-of-fold embeddings of `data/genre/` (issue 12): the shipped
logistic regression against alternatives, scored on whole held-out files (GroupKFold by file).

    python training/genre_lab.py --crossfit ~/.cache/memsift-train/biencoder/fold*/results.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import GroupKFold, cross_val_predict  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from train_heads import C_SOFTMAX, LOOKUP, CrossFit, read  # noqa: E402

from memsift.classifiers.encoders import HashingEncoder  # noqa: E402
from memsift.classifiers.features import cue_vector  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--crossfit", type=Path, nargs="+", required=True)
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "memsift-train" / "vectors")
    args = ap.parse_args()
    folds = CrossFit(args.crossfit, "memsift-e5-v1", args.cache)
    genre = read("genre")
    vecs = np.zeros((len(genre), 384), np.float32)
    for stem in sorted({g["file"] for g in genre}):
        idx = [i for i, g in enumerate(genre) if g["file"] == stem]
        vecs[idx] = folds.for_file(stem).query([genre[i]["text"] for i in idx])
    cues = np.stack([cue_vector(g["text"]) for g in genre])
    X = np.hstack([vecs, cues])
    classes = sorted({g["genre"] for g in genre})
    y = np.array([classes.index(g["genre"]) for g in genre])
    files = [g["file"] for g in genre]
    lookup = np.array([c in LOOKUP for c in classes])
    cv = GroupKFold(5)

    def report(name, proba):
        pred = proba.argmax(1)
        print(f"{name:28} genre {np.mean(pred == y):.3f} lookup {np.mean(lookup[pred] == lookup[y]):.3f}", flush=True)

    def softmax(z):
        z = z - z.max(1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(1, keepdims=True)

    lin = cross_val_predict(LogisticRegression(C=C_SOFTMAX, class_weight="balanced", max_iter=4000), X, y,
                            groups=files, cv=cv, method="predict_proba")
    report("logistic C16 (shipped)", lin)
    for c in (1.0, 4.0):
        p = cross_val_predict(LogisticRegression(C=c, class_weight="balanced", max_iter=4000), X, y,
                              groups=files, cv=cv, method="predict_proba")
        report(f"logistic C{c}", p)
    mlp = cross_val_predict(make_pipeline(StandardScaler(), MLPClassifier((256,), alpha=1e-1, max_iter=300,
                                                                           early_stopping=True, random_state=0)),
                            X, y, groups=files, cv=cv, method="predict_proba")
    report("mlp 256", mlp)
    H = HashingEncoder().query([g["text"] for g in genre])
    hp = cross_val_predict(LogisticRegression(C=4.0, class_weight="balanced", max_iter=4000), H, y,
                           groups=files, cv=cv, method="predict_proba")
    report("hashing logistic", hp)
    for w in (0.2, 0.35, 0.5):
        report(f"log-mix e5 + {w} hashing", softmax(np.log(lin + 1e-9) + w * np.log(hp + 1e-9)))
        report(f"log-mix mlp+lin + {w} hashing", softmax(np.log(lin + 1e-9) + np.log(mlp + 1e-9) + w * np.log(hp + 1e-9)))


if __name__ == "__main__":
    main()
