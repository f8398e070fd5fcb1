"""Small trained heads over an encoder's vectors, loaded from the shipped `.npz` weights.

`training/train_heads.py` writes `weights/heads-<encoder name>.npz` with, per head `h`:

- a softmax head (`genre`, `keep_topic`, `keep_exchange`): `h.W` (k, d), `h.b` (k,),
  `h.classes` (k,), `h.temperature` (), `h.cues` () - whether the six surface cues of
  `features.cue_vector` follow the embedding in the input;
- a logistic head (`note_answers`, `passage_answers`): `h.w` (f,), `h.b` () over
  `features.shortlist_features`, and `h.background` (): the mean background cosine in training,
  the prior of `features.shrunk_background`.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import numpy as np

from .features import cue_vector


@dataclass(frozen=True)
class SoftmaxHead:
    """Multinomial logistic regression with a fitted temperature (Guo et al. 2017)."""

    classes: tuple[str, ...]
    W: np.ndarray
    b: np.ndarray
    temperature: float
    cues: bool

    def probabilities(self, vector: np.ndarray, text: str) -> dict[str, float]:
        """P(class) for one embedded text; `vector` is (d,)."""
        x = np.concatenate([vector, cue_vector(text)]) if self.cues else vector
        z = (self.W @ x + self.b) / self.temperature
        z = np.exp(z - z.max())
        p = z / z.sum()
        return {c: float(v) for c, v in zip(self.classes, p)}


@dataclass(frozen=True)
class LogisticHead:
    """A calibrated yes/no probability over a few pair features."""

    w: np.ndarray
    b: float
    background: float

    def probability(self, features: np.ndarray) -> float:
        return float(1.0 / (1.0 + np.exp(-(features @ self.w + self.b))))


def weights_path(encoder_name: str):
    """The packaged weights file of an encoder (a `Traversable`)."""
    return resources.files("memsift.classifiers").joinpath("weights", f"heads-{encoder_name}.npz")


def load_heads(encoder_name: str) -> dict[str, SoftmaxHead | LogisticHead]:
    """All heads trained for `encoder_name`. Raises `FileNotFoundError` if none ship."""
    with weights_path(encoder_name).open("rb") as fh:
        data = dict(np.load(fh, allow_pickle=False))
    names = {key.split(".", 1)[0] for key in data}
    heads: dict[str, SoftmaxHead | LogisticHead] = {}
    for name in names:
        if f"{name}.W" in data:
            heads[name] = SoftmaxHead(
                classes=tuple(str(c) for c in data[f"{name}.classes"]),
                W=data[f"{name}.W"].astype(np.float32),
                b=data[f"{name}.b"].astype(np.float32),
                temperature=float(data[f"{name}.temperature"]),
                cues=bool(data[f"{name}.cues"]),
            )
        else:
            heads[name] = LogisticHead(
                w=data[f"{name}.w"].astype(np.float32),
                b=float(data[f"{name}.b"]),
                background=float(data[f"{name}.background"]),
            )
    return heads
