"""Remote decision models: System One against a real laya-serve on 127.0.0.1 (scripted
answers through its real HTTP layer, auth, rate limit and validation), the Decisions and
logprob formats against a small local server; every failure falls back to the embedded
model within the 2 s budget."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from memsift.breaker import Breakers
from memsift.classifiers import Request, load_question
from memsift.classifiers.remote import (DecisionsModel, FallbackModel, LogprobModel, RemoteError, SystemOneModel,
                                        load_model)

laya = pytest.importorskip("laya_serve", reason="laya-serve is a dev dependency: pip install -e '.[dev]'")
uvicorn = pytest.importorskip("uvicorn")

from laya_serve.app import create_app  # noqa: E402
from laya_serve.inference import FakeBackend  # noqa: E402
from laya_serve.settings import Settings as LayaSettings  # noqa: E402

from .jsonserver import JSONServer  # noqa: E402

GENRE = load_question("genre").question
NOTE = load_question("note_answers")
MESSAGE = "why did we pick Mollie over Stripe again? token ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij"


def genre_request() -> Request:
    return Request({"message": MESSAGE}, {"genre": GENRE})


def notes_request() -> Request:
    notes = [{"id": "N1", "text": "Payments: Mollie chosen over Stripe for iDEAL and Bancontact."},
             {"id": "N2", "text": "Hosting: the shop runs on Scalingo."}]
    return Request({"message": MESSAGE, "notes": notes}, {f"note_answers.{i}": NOTE.for_item(i) for i in range(2)})


class Scripted(FakeBackend):
    """laya-serve's fake backend, answering from a script (the research note's recipe)."""

    def __init__(self):
        super().__init__(serving_model="jev-1.13.0")
        self.script: dict = {}
        self.delay = 0.0
        self.states: list = []

    def predict(self, state, questions):
        self.states.append(state)
        time.sleep(self.delay)
        out = super().predict(state, questions)
        out["answers"].update({k: v for k, v in self.script.items() if k in out["answers"]})
        out["usage"] = {"input_tokens": 321, "output_tokens": 0}
        return out


@pytest.fixture(scope="module")
def jev():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = Scripted()
    app = create_app(LayaSettings(backend="fake", api_key="test-key", rate_limit_per_minute=1000), backend=backend)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}", backend
    server.should_exit = True
    thread.join(5)


@pytest.fixture
def scripted_jev(jev):
    url, backend = jev
    backend.script, backend.delay = {}, 0.0
    probs = {g: 0.0 for g in GENRE.options()}
    probs["past_choice"] = 0.95
    probs["reaction"] = 0.05
    backend.script = {"genre": {"type": "choice", "choice": "past_choice", "confidence": 0.9, "probabilities": probs},
                      "note_answers.0": {"type": "noul", "noul": 0.97}, "note_answers.1": {"type": "noul", "noul": 0.02}}
    return url, backend


def test_system_one_answers_through_a_real_server(scripted_jev):
    url, backend = scripted_jev
    model = SystemOneModel(url, "jev-1.13", "test-key")
    genre = model.decide(genre_request())["genre"]
    assert genre.choice == "past_choice" and genre.p("past_choice") == pytest.approx(0.95)
    notes = model.decide(notes_request())
    assert notes["note_answers.0"].noul == pytest.approx(0.97) and notes["note_answers.1"].noul == pytest.approx(0.02)
    assert model.usage.input_tokens == 642 and model.usage.cost_usd == pytest.approx(642 * 0.042 / 1e6)
    assert "ghp_ABCDEFGHIJ" not in json.dumps(backend.states)  # masked before it left


@pytest.fixture
def embedded():
    from memsift.classifiers.embedded import EmbeddedChoiceModel
    from memsift.classifiers.encoders import HashingEncoder

    return EmbeddedChoiceModel(HashingEncoder())


@pytest.mark.parametrize("case", ["wrong key", "unknown model", "timeout", "missing option", "refused"])
def test_every_failure_falls_back_to_the_embedded_model(case, scripted_jev, embedded, tmp_path):
    url, backend = scripted_jev
    key, name = "test-key", "jev-1.13"
    if case == "wrong key":
        key = "nope"
    elif case == "unknown model":
        name = "gpt-4o"
    elif case == "timeout":
        backend.delay = 3.0
    elif case == "missing option":
        backend.script["genre"] = {"type": "choice", "choice": "reaction", "probabilities": {"reaction": 1.0}}
    elif case == "refused":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{s.getsockname()[1]}"
    breakers = Breakers(tmp_path / "services.sqlite")
    model = FallbackModel(SystemOneModel(url, name, key), embedded, breakers)
    start = time.perf_counter()
    got = model.decide(genre_request())
    assert time.perf_counter() - start < 2.5  # the 2 s budget, plus the embedded answer
    assert got == embedded.decide(genre_request())  # exactly what the embedded model says
    assert model.events[-1]["source"] == "embedded" and model.events[-1]["why"]
    assert breakers.state("decision").state == "open"
    again_start = time.perf_counter()
    model.decide(genre_request())
    assert model.events[-1]["why"] == "remote model paused" and time.perf_counter() - again_start < 1.0
    assert any("paused since" in n for n in breakers.take_notices("s1"))


def test_rate_limit_429_falls_back(embedded, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(LayaSettings(backend="fake", api_key="k", rate_limit_per_minute=1))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    try:
        model = SystemOneModel(f"http://127.0.0.1:{port}", "jev-1.13", "k")
        model.decide(genre_request())
        with pytest.raises(RemoteError, match=r"429.*retry after \d+"):
            model.decide(genre_request())
    finally:
        server.should_exit = True


def local(reply) -> JSONServer:
    """A local server answering the Decisions and chat/completions formats: 200 and `reply(path, body)`."""
    return JSONServer(lambda path, body: (200, reply(path, body)))


def test_openai_decisions_format():
    def reply(path, body):
        assert path == "/v1/decisions"
        out = []
        for q in body["questions"]:
            if q["type"] == "predicate":
                out.append({"type": "predicate", "name": q["name"], "probability": 0.9 if q["name"].endswith(".0") else 0.1})
        return {"answers": out, "usage": {"input_tokens": 50}}

    server = local(reply)
    try:
        got = DecisionsModel(server.url, "gpt-6-luna", "k").decide(notes_request())
    finally:
        server.close()
    assert got["note_answers.0"].noul == pytest.approx(0.9) and got["note_answers.1"].noul == pytest.approx(0.1)
    assert server.requests[0]["body"]["questions"][0] == {"type": "predicate", "name": "note_answers.0",
                                                "instructions": NOTE.for_item(0).instructions}


def test_decisions_refusal_is_an_error():
    server = local(lambda path, body: {"answers": [{"type": "refusal", "name": "genre"}]})
    try:
        with pytest.raises(RemoteError, match="refused"):
            DecisionsModel(server.url, "m", "k").decide(genre_request())
    finally:
        server.close()


def test_logprob_format_renormalises_the_letters_and_refuses_low_coverage():
    import math

    def reply(path, body):
        assert path == "/chat/completions" and body["max_tokens"] == 1 and body["logprobs"] is True
        yes = "notes[0]" in body["messages"][0]["content"]
        top = [{"token": "A", "logprob": math.log(0.6 if yes else 0.1)}, {"token": " B", "logprob": math.log(0.2 if yes else 0.3)},
               {"token": "The", "logprob": math.log(0.2 if yes else 0.6)}]
        return {"choices": [{"logprobs": {"content": [{"token": "A", "top_logprobs": top}]}}], "usage": {"prompt_tokens": 80}}

    server = local(reply)
    try:
        model = LogprobModel(server.url, "qwen3")
        with pytest.raises(RemoteError, match="hold 0.40"):
            model.decide(notes_request())  # notes[1]: the letters hold 0.4 of the mass
        got = model.decide(Request(notes_request().state, {"note_answers.0": NOTE.for_item(0)}))
    finally:
        server.close()
    assert got["note_answers.0"].noul == pytest.approx(0.75)


def test_load_model_from_the_environment(tmp_path):
    assert load_model(tmp_path, {}).name.startswith("embedded:")
    m = load_model(tmp_path, {"MEMSIFT_DECISION_API": "systemone", "MEMSIFT_DECISION_URL": "http://127.0.0.1:9",
                              "MEMSIFT_DECISION_KEY": "k", "MEMSIFT_DECISION_PRICE": "0.5"})
    assert m.name.startswith("systemone:jev-latest (fallback embedded:") and m.remote.usage.price_per_mtok == 0.5
    with pytest.raises(ValueError, match="needs MEMSIFT_DECISION_URL"):
        load_model(tmp_path, {"MEMSIFT_DECISION_API": "decisions"})
    with pytest.raises(ValueError, match="use systemone"):
        load_model(tmp_path, {"MEMSIFT_DECISION_API": "gpt"})


def test_system_one_answer_missing_an_option_is_an_error():
    server = local(lambda path, body: {"answers": {"genre": {"type": "choice", "probabilities": {"reaction": 1.0}}}})
    try:
        with pytest.raises(RemoteError, match="every option"):
            SystemOneModel(server.url, "m", "k").decide(genre_request())
    finally:
        server.close()


def test_the_hook_decides_with_the_remote_model(scripted_jev, tmp_path, memsift_home):
    from .conftest import run_memsift

    url, backend = scripted_jev
    project = tmp_path / "shop"
    (project / ".git").mkdir(parents=True)
    note = "Payments: Mollie chosen over Stripe for iDEAL and Bancontact."
    assert run_memsift("notes", "add", "--project", str(project), "--kind", "decision", note).returncode == 0
    payload = {"session_id": "s1", "transcript_path": "", "cwd": str(project), "prompt": "hmm, and the checkout page?",
               "hook_event_name": "UserPromptSubmit"}
    env = {"MEMSIFT_DECISION_API": "systemone", "MEMSIFT_DECISION_URL": url, "MEMSIFT_DECISION_KEY": "test-key",
           "MEMSIFT_DECISION_MODEL": "jev-1.13"}
    done = run_memsift("hook", "user-prompt-submit", stdin=json.dumps(payload).encode(), env=env)
    assert done.returncode == 0
    assert note in json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]  # the remote judged it
    log = (memsift_home / "logs" / "hook.log").read_text()
    assert "input tokens" in log and '"source": "systemone:jev-1.13"' in log
    env["MEMSIFT_DECISION_KEY"] = "wrong"  # the remote refuses: the embedded model decides alone
    embedded_only = run_memsift("hook", "user-prompt-submit", stdin=json.dumps(dict(payload, session_id="s2")).encode())
    fallback = run_memsift("hook", "user-prompt-submit", stdin=json.dumps(dict(payload, session_id="s3")).encode(), env=env)
    assert fallback.returncode == 0

    def items(out: bytes) -> list[str]:
        context = json.loads(out)["hookSpecificOutput"]["additionalContext"] if out else ""
        return [line for line in context.splitlines() if line.startswith("[memsift ")]

    assert items(fallback.stdout) == items(embedded_only.stdout)  # nothing the embedded model would not paste
    assert "the remote decision model is paused" in fallback.stdout.decode()
