"""Compare relevance judges on out-of-fold embeddings of `data/pairs/` (issue 12, item 4).

    python training/judge_lab.py --encoder e5-small-q4
    python training/judge_lab.py --crossfit ~/.cache/memsift-train/biencoder/fold*/results.json

Embeddings are cached in `--cache` (one `.npy` per encoder file, tier and text list), so a
second run only fits. For each judge it prints the pair AUC by project folds and the
per-message operating points (paste the best candidate when P >= t).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sklearn.ensemble import HistGradientBoostingClassifier  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402
from sklearn.model_selection import GroupKFold, cross_val_predict  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from train_heads import LOOKUP, SHORTLIST, read  # noqa: E402

from memsift.classifiers import features as F  # noqa: E402


def cached_vectors(cache: Path, enc, tag: str, kind: str, texts: list[str]) -> np.ndarray:
    key = hashlib.sha256(("\x00".join(texts) + kind + tag).encode()).hexdigest()[:16]
    path = cache / f"{kind}-{key}.npy"
    if path.exists():
        return np.load(path)
    v = enc.query(texts) if kind == "query" else enc.passage(texts)
    np.save(path, v)
    return v


def seen_messages(tier: str, pick, cache: Path) -> list[tuple]:
    rows = read("pairs")
    by_project = defaultdict(list)
    for r in rows:
        if r["type"] == tier:
            by_project[r["project"]].append(r)
    seen = []
    for project, items in sorted(by_project.items()):
        enc, tag = pick(project)
        vectors = cached_vectors(cache, enc, tag, "passage", [n["text"] for n in items])
        queries = [r for r in rows if r["type"] == "query" and r["project"] == project]
        qv = cached_vectors(cache, enc, tag, "query", [q["text"] for q in queries])
        for q, v in zip(queries, qv):
            seen.append((project, q["text"], set(q["answers"]), items, vectors @ v, v))
    return seen


def build(seen, featurize, seed=0):
    prior = float(np.mean([np.median(s[4]) for s in seen]))
    X, y, query = [], [], []
    rng = np.random.default_rng(seed)
    for k, (project, message, answers, items, cos, qv) in enumerate(seen):
        small = rng.choice(len(items), size=int(rng.integers(1, 7)), replace=False)
        for name, pool in ((f"{project}:{k}", np.arange(len(items))), (f"{project}:{k}:small", small)):
            background = F.shrunk_background(float(np.median(cos[pool])), len(pool), prior)
            shortlist = pool[np.argsort(-cos[pool])[:SHORTLIST]]
            X.append(featurize(cos[shortlist], background, message, [items[i] for i in shortlist], qv))
            y += [items[i]["id"] in answers for i in shortlist]
            query += [name] * len(shortlist)
    return np.vstack(X), np.array(y, dtype=int), np.array(query)


def points(p, y, query, ts=(0.3, 0.4, 0.5, 0.6, 0.7)):
    groups = defaultdict(list)
    for i, q in enumerate(query):
        groups[q].append(i)
    out = []
    for t in ts:
        found = wrong = noise = n_ans = n_none = 0
        for q, idx in groups.items():
            idx = np.array(idx)
            ans = y[idx].any()
            n_ans += ans
            n_none += not ans
            best = idx[np.argmax(p[idx])]
            if p[best] < t:
                continue
            if ans:
                found += bool(y[best])
                wrong += not y[best]
            else:
                noise += 1
        out.append(f"t{t}: found {found/n_ans:.3f} wrong {wrong/n_ans:.3f} nothing {noise/n_none:.3f}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--encoder", default="e5-small-q4")
    ap.add_argument("--crossfit", type=Path, nargs="+")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "memsift-train" / "vectors")
    ap.add_argument("--tier", default="note")
    ap.add_argument("--heads", default=None, help="whose genre head (default: the encoder's)")
    ap.add_argument("--only", default=None)
    ap.add_argument("--models", default="logistic,gbm")
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    from memsift.classifiers.encoders import E5Encoder, load_encoder

    if args.crossfit:
        folds = []
        for path in args.crossfit:
            r = json.loads(path.read_text())
            folds.append((E5Encoder(r["export"], "memsift-e5-v1"), set(r["held_out"]), r["export"]))

        def pick(project):
            for enc, held, tag in folds:
                if project in held:
                    return enc, tag
            raise ValueError(project)
    else:
        enc = load_encoder(args.encoder)
        pick = lambda project: (enc, args.encoder)  # noqa: E731
    seen = seen_messages(args.tier, pick, args.cache)
    from memsift.classifiers.heads import load_heads

    genre = load_heads(args.heads or args.encoder)["genre"]
    lookup = [i for i, c in enumerate(genre.classes) if c in LOOKUP]

    def v3(cos, bg, message, items, qv):
        base = F.shortlist_features_v2(cos, bg, message, items)
        pr = genre.probabilities(qv, message)
        p = np.array([pr[c] for c in genre.classes], np.float32)
        extra = np.concatenate([[p[lookup].sum()], p])
        return np.hstack([base, np.tile(extra, (len(items), 1))])

    featurizers = {"base": lambda c, b, m, i, q: F.shortlist_features(c, b, m, i),
                   "v2": lambda c, b, m, i, q: F.shortlist_features_v2(c, b, m, i), "v3": v3}
    if args.only:
        featurizers = {k: v for k, v in featurizers.items() if k in args.only.split(",")}
    for fname, fz in featurizers.items():
        X, y, query = build(seen, fz)
        projects = np.array([q.split(":")[0] for q in query])
        models = {
            "logistic": make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=3000)),
            "gbm": HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05, max_leaf_nodes=15,
                                                  min_samples_leaf=40, l2_regularization=1.0, random_state=0),
            "mlp": make_pipeline(StandardScaler(), MLPClassifier((32,), alpha=1e-2, max_iter=400, early_stopping=True,
                                                                 random_state=0)),
        }
        for mname, model in ((k, v) for k, v in models.items() if k in args.models.split(",")):
            p = cross_val_predict(model, X, y, groups=projects, cv=GroupKFold(5), method="predict_proba")[:, 1]
            print(f"{args.tier} {fname:5} {mname:9} X{X.shape} AUC {roc_auc_score(y, p):.4f}")
            for line in points(p, y, query):
                print("    ", line)


if __name__ == "__main__":
    main()
