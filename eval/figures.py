"""FORMAT.md's figures of a replay: what `replay.score` counts and `report` draws.

A module of its own so that the report reads figures without importing the replay (one
direction of imports: replay -> report -> figures).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Figures:
    """FORMAT.md's figures for one conversation or a sum of them."""

    name: str
    turns: int = 0
    pasted: int = 0
    chars: int = 0
    quiet: int = 0
    pasted_for_nothing: int = 0
    recall_turns: int = 0
    found: int = 0
    wrong: int = 0
    genre_known: int = 0
    genre_right: int = 0
    ms: list[float] = field(default_factory=list)

    def add(self, other: "Figures") -> None:
        for key in ("turns", "pasted", "chars", "quiet", "pasted_for_nothing", "recall_turns",
                    "found", "wrong", "genre_known", "genre_right"):
            setattr(self, key, getattr(self, key) + getattr(other, key))
        self.ms += other.ms

    def row(self) -> str:
        ms = np.array(self.ms or [0.0])
        genre = f"{self.genre_right}/{self.genre_known}" if self.genre_known else "-"
        return (
            f"{self.name:<24} pasted {self.pasted:>3}/{self.turns:<3} chars {self.chars:>7,} "
            f"nothing-needed {self.pasted_for_nothing:>3}/{self.quiet:<3} found {self.found:>2}/{self.recall_turns:<2} "
            f"wrong {self.wrong:>2}  genre {genre:>7}  ms mean {ms.mean():6.1f} p50 {np.percentile(ms, 50):6.1f} "
            f"p95 {np.percentile(ms, 95):6.1f} max {ms.max():7.1f}"
        )
