"""Decide, when notes are written, which older note a new note replaces.

The research prototype showed that cosine alone cannot tell "replaces" from "related"
(`prototype.md`, section 3.2: a cos >= 0.90 swap rule caught 8 of 12 superseded pairs with 19
false swaps). So a link needs three things at once:

1. the two notes are each other's nearest neighbour in time order (the new note's nearest
   older note, and the older note's nearest newer note);
2. their cosine is at least `MIN_COSINE` and they share at least `MIN_SHARED` content
   words (the same subject named, not just the same register);
3. the new note says that something changed: it contains a change cue ("moved from",
   "instead of", "no longer", "remplace", "nicht mehr", "ya no", "改为", ...), or it repeats
   the older note with a value changed (`changed_value`: "Staging runs in eu-west-1." then
   "Staging runs in us-east-1."): two notes that differ in a value are never duplicates;
   the newer one is the correction.

The result is data: the older note's status becomes "superseded by <id>" in the Markdown,
where the user can see and undo it, and recall never pastes a superseded note.
"""

from __future__ import annotations

import re
from dataclasses import replace
from difflib import SequenceMatcher
from typing import Mapping

import numpy as np

from .classifiers.features import CJK_CHARS, content_tokens
from .notefile import Note, text_hash

MIN_COSINE = 0.88
MIN_SHARED = 2

_CUES = [
    # en
    r"\breplac(?:es|ed|ing)\b", r"\binstead of\b", r"\bno longer\b", r"\bnot .{0,20}anymore\b",
    r"\bmoved (?:from|off|away|to)\b", r"\bswitched\b", r"\bmigrated\b", r"\bsupersed",
    r"\brenewed\b", r"\bdropped\b", r"\bnow (?:uses|runs|goes|lives|is)\b", r"\bfrom now on\b",
    r"\bchanged (?:from|to)\b", r"\bdeprecated\b",
    # fr
    r"\bremplac", r"\bau lieu de?\b", r"\bne .{0,30}\bplus\b", r"\bn'.{0,30}\bplus\b",
    r"\bpass(?:é|e|és|ée) (?:de|à|a|sur|sous)\b", r"\bmigr(?:é|e|ation)", r"\babandonn",
    r"\bdésormais\b", r"\bdorénavant\b", r"\brenouvel", r"\bchang(?:é|e) de\b",
    # de
    r"\bersetzt\b", r"\bstatt\b", r"\banstelle\b", r"\bnicht mehr\b", r"\bumgestellt\b",
    r"\bgewechselt\b", r"\bmigriert\b", r"\babgelöst\b", r"\bab jetzt\b", r"\bkünftig\b",
    r"\bneu verhandelt\b", r"\bverlängert\b",
    # es
    r"\breemplaz", r"\ben (?:lugar|vez) de\b", r"\bya no\b", r"\bcambiamos\b", r"\bmigr(?:ado|amos)\b",
    r"\bpasamos (?:de|a)\b", r"\ba partir de ahora\b", r"\bsustitu", r"\brenovad",
    # zh
    r"取代", r"替代", r"改为", r"改用", r"不再", r"换成", r"迁移", r"从现在起", r"替换", r"弃用", r"改成",
]
_CUE = re.compile("|".join(_CUES), re.IGNORECASE)


def says_change(text: str) -> bool:
    """True when `text` states that something changed or was replaced."""
    return bool(_CUE.search(text))


_TOKEN = re.compile(rf"[{CJK_CHARS}]|[^\W\d_]+|\d+", re.UNICODE)
_CJK = re.compile(f"[{CJK_CHARS}]")
#: `changed_value`: at most this many words changed. Three cover a value with its unit or a
#: compound name ("eu-west-1" is three tokens, "2,500 calls" two).
VALUE_WORDS = 3


def tokens(text: str) -> list[str]:
    """`text` as a list of case-folded words, numbers and single CJK characters."""
    return _TOKEN.findall(text.casefold())


def _words(toks: list[str]) -> int:
    """How many words `toks` make, a CJK character counting as half of one (Chinese words
    average about 1.5 characters; two is a round upper figure)."""
    cjk = sum(1 for t in toks if _CJK.fullmatch(t))
    return len(toks) - cjk + (cjk + 1) // 2


def changed_value(old: str, new: str) -> bool:
    """True when `new` repeats `old` with a few words changed, added or dropped: at most
    `VALUE_WORDS` words on either side of a word-level diff (`difflib.SequenceMatcher`),
    and no more than the words they share. Identical word sequences are a repeat, not a
    change: False.
    """
    a, b = tokens(old), tokens(new)
    if not a or not b or a == b:
        return False
    ops = SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    changed = sum(max(_words(a[i1:i2]), _words(b[j1:j2])) for tag, i1, i2, j1, j2 in ops if tag != "equal")
    shared = sum(_words(a[i1:i2]) for tag, i1, i2, _, _ in ops if tag == "equal")
    return changed <= VALUE_WORDS and changed <= shared


def link_superseded(
    notes: list[Note], vectors: Mapping[str, np.ndarray], new_ids: set[str]
) -> list[Note]:
    """Return `notes` with `superseded_by` set on the older notes that a note in `new_ids` replaces.

    `vectors` maps each note's text hash (`notes.text_hash`) to its passage embedding. Notes
    already superseded are left as they are and are not candidates. Nothing is deleted:
    a link only marks the older note, which stays in the file with its history.
    """
    active = [n for n in notes if n.active]
    if len(active) < 2:
        return notes
    matrix = np.stack([vectors[text_hash(n.text)] for n in active])
    sims = matrix @ matrix.T
    np.fill_diagonal(sims, -1.0)
    order = {n.id: i for i, n in enumerate(active)}
    links: dict[str, str] = {}
    when = [(n.date, i) for i, n in enumerate(active)]  # ties in date go by position in the file
    for new in sorted((n for n in active if n.id in new_ids), key=lambda n: when[order[n.id]]):
        i = order[new.id]
        older = [j for j in range(len(active)) if when[j] < when[i] and active[j].id not in links]
        if not older:
            continue
        j = max(older, key=lambda j: sims[i, j])
        if not (says_change(new.text) or changed_value(active[j].text, new.text)):
            continue
        newer_than_j = [m for m in range(len(active)) if when[m] > when[j]]
        shared = len(content_tokens(new.text) & content_tokens(active[j].text))
        if sims[i, j] >= MIN_COSINE and shared >= MIN_SHARED and max(newer_than_j, key=lambda m: sims[j, m]) == i:
            links[active[j].id] = new.id
    return [replace(n, superseded_by=links[n.id]) if n.id in links else n for n in notes]
