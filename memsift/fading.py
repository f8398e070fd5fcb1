"""How much a note still weighs with its age.

A captured `context` or `incident` note states how things were when a session noticed them
(a fact of the moment, a failure and its fix): the older it is, the likelier it is out of
date. It loses weight with a half-life (`Settings.fade_half_life_days`); once below
`Settings.fade_floor` it is no longer pasted, and stays in the file. A `decision`, a
`constraint` or a `convention` holds until a newer note supersedes it, and a note the user
wrote by hand (no `session` in its header) is the user's word: those never fade.
"""

from __future__ import annotations

import datetime as dt

from .notefile import Note

#: The kinds that fade (see the module docstring).
FADING_KINDS = frozenset({"context", "incident"})


def weight(note: Note, today: dt.date, half_life_days: float) -> float:
    """The note's weight on `today`, in (0, 1]: 0.5 ** (age in days / `half_life_days`) for a
    captured note of a `FADING_KINDS` kind, 1.0 for any other note, for a date in the future
    and for a date that does not parse (a hand edit: it is reported elsewhere)."""
    if note.kind not in FADING_KINDS or note.session is None or half_life_days <= 0:
        return 1.0
    try:
        age = (today - dt.date.fromisoformat(note.date)).days
    except ValueError:
        return 1.0
    return 0.5 ** (age / half_life_days) if age > 0 else 1.0
