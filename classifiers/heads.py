"""Small trained heads over an encoder's vectors, loaded from the shipped `.npz` weights.

`training/train_heads.py` writes `weights/heads-<encoder name>.npz` with, per head `h`:

- a softmax head (`genre`, `keep_topic`, `keep_exchange`): `h.W` (k, d), `h.b` (k,),
  `h.classes` (k,), `h.temperature` (), `h.cues` () - whether the six surface cues of
  `features.cue_vector` follow the embedding in the input - and optionally one hidden layer
  before it, `h.W1` (d, d_in) and `h.b1` (d,), with ReLU (a multilayer perceptron);
- a relevance head (`note_answers`, `passage_answers`) over the columns `h.features` (f,)
  names (`RELEVANCE_COLUMNS`; absent: `features.LEGACY_PAIR_FEATURES`), with `h.background`
  (): the mean background cosine in training, the prior of `features.shrunk_background`, and
  optionally `h.threshold` (): the P(answers) to paste at, chosen on held-out folds. Either
  logistic, `h.w` (f,) and `h.b` (), or gradient-boosted trees (`TreeHead`): `h.tree_start`
  (t + 1,) offsets into the node arrays `h.node_feature`, `h.node_threshold`, `h.node_left`,
  `h.node_right` (children as indices within a tree; -1 on a leaf), `h.node_missing_left`,
  `h.node_value`, the raw score's start `h.base` (), and Platt scaling `h.platt` (2,).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from .features import LEGACY_PAIR_FEATURES, PAIR_FEATURES, cue_vector

#: What a relevance head may read: the pair features, then the message's genre
#: probabilities as the genre head gives them (`lookup_p`, their sum over the lookup genres,
#: and one column per genre, `genre_<name>`).
GENRE_COLUMNS = ("lookup_p", *(f"genre_{g}" for g in (
    "complete_instruction", "conversation_question", "existing_code_task", "finished_work_action",
    "general_knowledge", "new_decision", "past_choice", "past_exchange", "reaction", "recurring_problem",
    "resume_work")))
RELEVANCE_COLUMNS = (*PAIR_FEATURES, *GENRE_COLUMNS)


@dataclass(frozen=True)
class SoftmaxHead:
    """Multinomial logistic regression with a fitted temperature (Guo et al. 2017), over the
    input or, with `hidden` (`W1` (h, d_in), `b1` (h,)), over one ReLU layer of it: a
    multilayer perceptron as scikit-learn's `MLPClassifier` fits it (microseconds here)."""

    classes: tuple[str, ...]
    W: np.ndarray
    b: np.ndarray
    temperature: float
    cues: bool
    hidden: tuple[np.ndarray, np.ndarray] | None = None

    def probabilities(self, vector: np.ndarray, text: str) -> dict[str, float]:
        """P(class) for one embedded text; `vector` is (d,)."""
        x = np.concatenate([vector, cue_vector(text)]) if self.cues else vector
        if self.hidden is not None:
            W1, b1 = self.hidden
            x = np.maximum(W1 @ x + b1, 0.0)
        z = (self.W @ x + self.b) / self.temperature
        z = np.exp(z - z.max())
        p = z / z.sum()
        return {c: float(v) for c, v in zip(self.classes, p)}


@dataclass(frozen=True)
class LogisticHead:
    """A calibrated yes/no probability over a few pair features (`columns`: indices into
    `RELEVANCE_COLUMNS`)."""

    w: np.ndarray
    b: float
    background: float
    columns: np.ndarray
    threshold: float | None = None
    #: The threshold its training chose for the messages of a genre, where it chose one
    #: (`training/train_heads.py`, `genre_thresholds`), by genre.
    genre_thresholds: dict[str, float] = field(default_factory=dict)

    @property
    def genre(self) -> bool:
        """Whether the head reads the message's genre probabilities."""
        return bool((self.columns >= len(PAIR_FEATURES)).any())

    def probabilities(self, rows: np.ndarray) -> np.ndarray:
        """P(answers) per row of `rows` (n, len(RELEVANCE_COLUMNS)), float (n,)."""
        z = rows[:, self.columns] @ self.w + self.b
        return 1.0 / (1.0 + np.exp(-z))


@dataclass(frozen=True)
class TreeHead:
    """Gradient-boosted regression trees on the log-odds, then Platt scaling (Platt 1999):
    P(answers) = sigmoid(a * (base + sum of the trees' leaves) + b). The trees are
    scikit-learn's `HistGradientBoostingClassifier` (Ke et al., "LightGBM", 2017), exported
    node by node by `training/train_heads.py`; evaluated here with numpy, every tree and
    every item of a shortlist at once (120 trees of depth 6 or less: under a millisecond,
    measured on 7 items)."""

    start: np.ndarray
    feature: np.ndarray
    split: np.ndarray
    left: np.ndarray
    right: np.ndarray
    missing_left: np.ndarray
    value: np.ndarray
    base: float
    platt: np.ndarray
    background: float
    columns: np.ndarray
    threshold: float | None = None
    genre_thresholds: dict[str, float] = field(default_factory=dict)

    genre = LogisticHead.genre

    def raw(self, rows: np.ndarray) -> np.ndarray:
        """The trees' summed log-odds per row, (n,): every tree at once, one level a step."""
        x = rows[:, self.columns].astype(np.float64)
        n = len(x)
        roots = self.start[:-1]
        at = np.broadcast_to(roots, (n, len(roots))).copy()  # (n, trees): each row's node in each tree
        row = np.arange(n)[:, None]
        while True:
            left = self.left[at]
            inner = left >= 0
            if not inner.any():
                break
            v = x[row, self.feature[at]]
            go_left = np.where(np.isnan(v), self.missing_left[at], v <= self.split[at])
            at = np.where(inner, roots + np.where(go_left, left, self.right[at]), at)
        return self.base + self.value[at].sum(axis=1)

    def probabilities(self, rows: np.ndarray) -> np.ndarray:
        """P(answers) per row of `rows` (n, len(RELEVANCE_COLUMNS)), float (n,)."""
        return 1.0 / (1.0 + np.exp(-(self.platt[0] * self.raw(rows) + self.platt[1])))


def weights_path(encoder_name: str):
    """The packaged weights file of an encoder (a `Traversable`)."""
    return resources.files("memsift.classifiers").joinpath("weights", f"heads-{encoder_name}.npz")


def softmax_from(data: dict[str, np.ndarray], name: str) -> SoftmaxHead:
    """The softmax head `name` of a heads file's arrays (the `name.*` keys above)."""
    return SoftmaxHead(
        classes=tuple(str(c) for c in data[f"{name}.classes"]),
        W=data[f"{name}.W"].astype(np.float32),
        b=data[f"{name}.b"].astype(np.float32),
        temperature=float(data[f"{name}.temperature"]),
        cues=bool(data[f"{name}.cues"]),
        hidden=(data[f"{name}.W1"].astype(np.float32), data[f"{name}.b1"].astype(np.float32))
        if f"{name}.W1" in data else None,
    )


def load_heads(encoder_name: str) -> dict[str, SoftmaxHead | LogisticHead | TreeHead]:
    """All heads trained for `encoder_name`. Raises `FileNotFoundError` if none ship."""
    with weights_path(encoder_name).open("rb") as fh:
        data = dict(np.load(fh, allow_pickle=False))
    names = {key.split(".", 1)[0] for key in data}
    heads: dict[str, SoftmaxHead | LogisticHead | TreeHead] = {}
    for name in names:
        if f"{name}.W" in data:
            heads[name] = softmax_from(data, name)
        else:
            columns = [str(c) for c in data.get(f"{name}.features", LEGACY_PAIR_FEATURES)]
            common = {
                "background": float(data[f"{name}.background"]),
                "columns": np.array([RELEVANCE_COLUMNS.index(c) for c in columns], dtype=np.int64),
                "threshold": float(data[f"{name}.threshold"]) if f"{name}.threshold" in data else None,
                "genre_thresholds": {str(g): float(t) for g, t in zip(data.get(f"{name}.threshold_genres", []),
                                                                       data.get(f"{name}.genre_threshold", []))},
            }
            if f"{name}.tree_start" in data:
                heads[name] = TreeHead(
                    start=data[f"{name}.tree_start"].astype(np.int64),
                    feature=data[f"{name}.node_feature"].astype(np.int64),
                    split=data[f"{name}.node_threshold"].astype(np.float64),
                    left=data[f"{name}.node_left"].astype(np.int64),
                    right=data[f"{name}.node_right"].astype(np.int64),
                    missing_left=data[f"{name}.node_missing_left"].astype(bool),
                    value=data[f"{name}.node_value"].astype(np.float64),
                    base=float(data[f"{name}.base"]),
                    platt=data[f"{name}.platt"].astype(np.float64),
                    **common,
                )
            else:
                heads[name] = LogisticHead(
                    w=data[f"{name}.w"].astype(np.float32), b=float(data[f"{name}.b"]), **common)
    return heads
