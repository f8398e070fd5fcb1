"""Text features shared by training and run time: cues, content tokens, pair features.

Everything here is pure Python + numpy and cheap (well under a millisecond per message),
so that the hook and the training script compute exactly the same numbers.
"""

from __future__ import annotations

import math
import re

import numpy as np

#: Characters of a message that the embedders read (e5-small reads at most 512 tokens).
MAX_EMBED_CHARS = 2000

#: Character ranges of scripts written without spaces (kana, CJK ideographs, Hangul).
CJK_CHARS = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_WORD = re.compile(rf"[^\W\d_]{{3,}}|\d+[a-z]+\w*|[{CJK_CHARS}]+", re.UNICODE)
_CJK_RUN = re.compile(rf"[{CJK_CHARS}]+")
# Words so common in developer messages that sharing them says nothing (en, fr, de, es).
_STOP = frozenset(
    """the and for with that this what was were are you your have has had not but did does
    can should would could will then than them they there here from into about just also
    still again now when where which who how why our out any all some one two get got use
    used using make need want like know think okay yes sure please thanks
    les des une est pas que qui pour dans avec sur par mais ont été tout fait faire plus
    comme quoi quand elle ils nous vous leur cette ces avait déjà encore alors donc juste
    der die das und ist nicht mit für auf den dem des ein eine wir ich sie hat haben war
    noch schon auch wie was wer wenn dann aber oder mal nur
    los las del que por para con una uno como pero más esto esta ese esa hay fue muy
    """.split()
)


def cue_vector(text: str) -> np.ndarray:
    """Six surface cues of a message, as float32 (6,).

    Cues: log length, a code block or newline, ends with a question mark, number of question
    marks, inline backticks, shorter than 40 characters. Taken from the prototype's genre head
    (research note `prototype.md`, section 1), which chose them by inner cross-validation.
    """
    stripped = text.strip()
    qmarks = stripped.count("?") + stripped.count("？")
    return np.array(
        [
            math.log1p(len(stripped)) / 8.0,
            1.0 if ("```" in stripped or "\n" in stripped) else 0.0,
            1.0 if stripped.endswith(("?", "？")) else 0.0,
            min(qmarks, 5) / 5.0,
            1.0 if "`" in stripped.replace("```", "") else 0.0,
            1.0 if len(stripped) < 40 else 0.0,
        ],
        dtype=np.float32,
    )


#: Words are cut to this many characters, a language-independent stemmer ("payments" and
#: "payment" meet at "paymen"); truncation stemming as studied by Mayfield and McNamee,
#: "Single N-gram Stemming", SIGIR 2003.
STEM_CHARS = 6


def content_tokens(text: str) -> set[str]:
    """Content words of `text`, lowercased and truncated to `STEM_CHARS`; CJK runs become
    character bigrams.

    Used for lexical overlap, never for retrieval ranking (that is BM25 in SQLite FTS5).
    """
    out: set[str] = set()
    for tok in _WORD.findall(text.lower()):
        if _CJK_RUN.fullmatch(tok):
            out.update(tok[i : i + 2] for i in range(max(len(tok) - 1, 1)))
        elif tok not in _STOP:
            out.add(tok[:STEM_CHARS])
    return out


#: Pseudo-count of the prior in `shrunk_background`.
BACKGROUND_PRIOR_WEIGHT = 8


def shrunk_background(median: float, n: int, prior: float) -> float:
    """The per-query background cosine, shrunk toward `prior` when the tier holds few items.

    With one stored note the median cosine is that note's own cosine, and the margin
    feature would read 0 for a perfect answer; `prior` (the mean background seen in training)
    weighs as `BACKGROUND_PRIOR_WEIGHT` items.
    """
    w = BACKGROUND_PRIOR_WEIGHT
    return (n * median + w * prior) / (n + w)


KINDS = ("decision", "constraint", "incident", "convention", "context")

#: The length the store-relative columns (`unique_shared`, `idf_shared`, `cos_z`) of
#: `shortlist_features` assume a shortlist has: the cascade judges the top 5 notes by cosine
#: plus up to 2 by BM25, and the judges learn from shortlists of 7. A shorter shortlist (a new
#: user's store of a few notes) is topped up with `SHORTLIST_SIZE - n` pseudo-candidates that
#: stand for the near-topic items a fuller store would have put beside it. Without them, a lone
#: note that answers reads like a near-topic note among many: `cos_z` 0 and `idf_shared` a fifth
#: of its value among six other notes (training/README.md, session 28).
SHORTLIST_SIZE = 7
#: What a pseudo-candidate is: the means over both tiers of what `training/train_heads.py`
#: prints for memsift-e5-v3's out-of-fold shortlists of 7 from the training stores of 14 items
#: or more (notes / passages): the share of the other candidates that hold a message word a
#: candidate holds (0.159 / 0.199), the shortlist's mean cosine above the store's median
#: (0.104 / 0.118) and its spread (standard deviation, 0.043 / 0.035).
PAD_HOLD_SHARE = 0.18
PAD_COS_LIFT = 0.11
PAD_COS_SPREAD = 0.04

#: The columns of the judges shipped before 2026-12-02's second judge (logistic heads that
#: name no columns read these, the first of `PAIR_FEATURES`).
LEGACY_PAIR_FEATURES = (
    "cos", "cos_margin", "overlap_message", "overlap_item", "shared_log",
    "rank", "below_top", "over_next", "newer_share", "log_length", "item_tokens",
    *(f"kind_{k}" for k in KINDS),
    *(f"cue_{i}" for i in range(6)),
)
#: Names of the columns of `shortlist_features`, in order.
PAIR_FEATURES = (
    *LEGACY_PAIR_FEATURES,
    "unique_shared", "idf_shared", "specific_shared", "specific_share", "cos_z",
)

_IDENT = re.compile(
    r"\b(?:[A-Za-z][A-Za-z0-9]*(?:[_./:-][A-Za-z0-9]+)+"  # snake_case, dotted, dashed, paths
    r"|[A-Z]?[a-z]+[A-Z][A-Za-z0-9]*"  # camelCase, PascalCase
    r"|[A-Z]{2,}[A-Za-z0-9]*"  # acronyms
    r"|\w*\d\w*)",  # anything with a digit: versions, codes, sizes
    re.UNICODE,
)
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{2,}\b")  # a capitalised word inside a sentence


def specific_tokens(text: str) -> set[str]:
    """Identifier-like tokens of `text`, lowercased: snake_case, dotted, dashed or slashed
    names, camelCase, acronyms, tokens with a digit, and capitalised words inside a sentence
    (tools, vendors, people). Sharing one says more than sharing a topic word."""
    out = {t.lower() for t in _IDENT.findall(text) if len(t) >= 2}
    out.update(t.lower() for t in _NAME.findall(text))
    return out


def shortlist_features(
    cosines: np.ndarray, background: float, message: str, items: list[dict]
) -> np.ndarray:
    """Features of each (message, item) pair of a shortlist, float32 (n, len(PAIR_FEATURES)).

    `cosines` (n,) are the message's query embedding against each item's passage embedding;
    `background` is the median cosine of the message over the whole tier (the per-query
    normaliser of `prototype.md`, section 3.2: cosine minus that median separated answers
    best among single signals). Items are mappings with `text` and optionally `date` and
    `kind`. Besides each pair's own cosine and word overlap, an item is placed among the
    other candidates: its rank, how far below the best it is, how far above the next (the
    background when it is alone), how many candidates are older (a newer note on a subject
    usually wins), the message's words it shares with no other candidate and their weight
    by how few candidates hold them (an inverse document frequency over the shortlist: a
    near-topic item shares the topic's words, the answer the specific ones), the
    identifier-like tokens it shares (`specific_tokens`), and its cosine standardised over
    the shortlist. Those last columns are taken over a shortlist topped up to
    `SHORTLIST_SIZE` with pseudo-candidates: each holds a message word with probability
    `PAD_HOLD_SHARE`, and their cosines have mean `background + PAD_COS_LIFT` and spread
    `PAD_COS_SPREAD`.
    """
    n = len(items)
    message_tokens = content_tokens(message)
    message_specific = specific_tokens(message)
    cues = cue_vector(message)
    order = np.argsort(-cosines)
    rank = np.empty(n, dtype=np.float32)
    rank[order] = np.arange(n)
    top = float(cosines[order[0]]) if n else 0.0
    second = float(cosines[order[1]]) if n > 1 else background  # alone, it stands out from the typical item
    pad = max(SHORTLIST_SIZE - n, 0)  # pseudo-candidates (above)
    pad_mean = background + PAD_COS_LIFT
    real_mean = float(np.mean(cosines)) if n else pad_mean
    mean = (n * real_mean + pad * pad_mean) / max(n + pad, 1)
    variance = (float(np.sum((cosines - mean) ** 2)) + pad * (PAD_COS_SPREAD ** 2 + (pad_mean - mean) ** 2)) / max(n + pad, 1)
    spread = max(math.sqrt(variance), 1e-3)
    alone = (1.0 - PAD_HOLD_SHARE) ** pad  # P(no pseudo-candidate holds a word)
    dates = [str(it.get("date") or "") for it in items]
    texts = [str(it.get("text", "")) for it in items]
    tokens = [content_tokens(t) for t in texts]
    held: dict[str, int] = {}  # message word -> candidates holding it
    for t in tokens:
        for w in t & message_tokens:
            held[w] = held.get(w, 0) + 1
    rows = []
    for i, item in enumerate(items):
        shared_words = message_tokens & tokens[i]
        shared = len(shared_words)
        specific = len(specific_tokens(texts[i]) & message_specific)
        cos = float(cosines[i])
        kind = item.get("kind")
        rows.append(np.concatenate([
            [
                cos,
                cos - background,
                shared / max(len(message_tokens), 1),
                shared / max(len(tokens[i]), 1),
                math.log1p(shared),
                rank[i],
                top - cos,
                cos - (second if rank[i] == 0 else top),
                sum(d < dates[i] for d in dates) / max(n - 1, 1),
                math.log1p(len(texts[i])) / 8.0,
                math.log1p(len(tokens[i])),
            ],
            [1.0 if kind == k else 0.0 for k in KINDS],
            cues,
            [
                math.log1p(alone * sum(held[w] == 1 for w in shared_words)),
                sum(math.log((n + pad + 1) / (held[w] + pad * PAD_HOLD_SHARE + 0.5)) for w in shared_words) / 5.0,
                math.log1p(specific),
                specific / max(len(message_specific), 1),
                (cos - mean) / spread,
            ],
        ]))
    return np.array(rows, dtype=np.float32).reshape(n, len(PAIR_FEATURES))
