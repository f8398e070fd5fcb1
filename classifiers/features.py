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

_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_WORD = re.compile(rf"[^\W\d_]{{3,}}|\d+[a-z]+\w*|[{_CJK}]+", re.UNICODE)
_CJK_RUN = re.compile(rf"[{_CJK}]+")
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


#: Names of the columns of `pair_features`, in order.
PAIR_FEATURES = ("cos", "cos_margin", "overlap_message", "overlap_item", "shared_log")


def pair_features(
    cos: float, background: float, message_tokens: set[str], item_tokens: set[str]
) -> np.ndarray:
    """Features of one (message, item) pair for the relevance judge, float32 (5,).

    `cos` is the cosine of the message's query embedding and the item's passage embedding;
    `background` is the median cosine of the message against every item of the same tier
    (the per-query normaliser of `prototype.md`, section 3.2: cosine minus that median
    separated answers best among single signals).
    """
    shared = len(message_tokens & item_tokens)
    return np.array(
        [
            cos,
            cos - background,
            shared / max(len(message_tokens), 1),
            shared / max(len(item_tokens), 1),
            math.log1p(shared),
        ],
        dtype=np.float32,
    )
