"""Remote decision models behind the same `ChoiceModel` protocol, and the fallback to the
embedded one.

Three wire formats (research notes `jev.md`, sections A and C, and `decision-model.md`,
section B, with request and response examples):

- `SystemOneModel`: `POST {base}/v1/systemone`, bearer key, the request's `state` and named
  questions as they are (memsift's contract *is* that format): TypeSafe's Jev, OpenRouter,
  llama.cpp, laya-serve and other servers that speak it;
- `DecisionsModel`: OpenAI's `POST {base}/v1/decisions` (`input`, an ordered array of
  `choice` / `predicate` questions, answers in the same order, possibly a `refusal`);
- `LogprobModel`: any OpenAI-compatible `POST {base}/chat/completions` that returns
  `top_logprobs`: each question becomes one prompt whose options are the letters A, B, ...,
  one token is asked for, and the letters' probabilities are renormalised; a question
  whose letters hold under half of the mass is refused as unreliable.

Each client sends every question about one item at a time, as the design requires, and
all the questions of a request in one call where the API allows (System One, Decisions);
the logprob client makes one call per question, in parallel. The message and items are
masked (`memsift.secrets`) before they leave. A call has one budget (`timeout_s`, connect
within `CONNECT_TIMEOUT_S`) and no retries: on any failure the client raises
`RemoteError`, and `FallbackModel` answers the whole request with the embedded model.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from .base import Answer, Question, Request, UnsupportedQuestion

log = logging.getLogger("memsift")

#: Seconds to open a connection to a remote model.
CONNECT_TIMEOUT_S = 0.3
#: The decision step's whole budget, in seconds (the design's 2 s).
BUDGET_S = 2.0
#: US dollars per million input tokens when the model's price is not configured: Jev's
#: published price (research note `decision-model.md`, section A: $0.042 per million input
#: tokens, output free).
DEFAULT_PRICE_PER_MTOK = 0.042
#: A logprob answer is refused when its option letters hold less probability than this.
MIN_LABEL_COVERAGE = 0.5
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class RemoteError(RuntimeError):
    """A remote model did not answer usably: unreachable, too slow, an HTTP error, a refusal,
    or an answer of the wrong shape. The message is short and holds no request content."""


@dataclass
class Usage:
    """Tokens billed so far by one client, and what they cost in US dollars."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    price_per_mtok: float = DEFAULT_PRICE_PER_MTOK

    @property
    def cost_usd(self) -> float:
        return self.input_tokens * self.price_per_mtok / 1e6

    def add(self, usage: Any) -> None:
        self.calls += 1
        if isinstance(usage, Mapping):
            self.input_tokens += int(usage.get("input_tokens") or usage.get("prompt_tokens") or 0)
            self.output_tokens += int(usage.get("output_tokens") or usage.get("completion_tokens") or 0)


def masked(value: Any) -> Any:
    """`value` (JSON-like) with every string's secrets masked."""
    from ..secrets import mask

    if isinstance(value, str):
        return mask(value).text
    if isinstance(value, Mapping):
        return {k: masked(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [masked(v) for v in value]
    return value


def _probabilities(question: Question, raw: Mapping[str, Any], qid: str) -> Answer:
    """An `Answer` from per-option probabilities that must cover every option asked."""
    options = question.options()
    try:
        probs = {o: float(raw[o]) for o in options}
    except (KeyError, TypeError, ValueError):
        raise RemoteError(f"{qid}: the answer does not give a probability for every option") from None
    total = sum(probs.values())
    if not all(0.0 <= p <= 1.0 + 1e-6 for p in probs.values()) or not total > 0:
        raise RemoteError(f"{qid}: probabilities out of range")
    return Answer(question.type, {o: p / total for o, p in probs.items()})


def _noul(question: Question, p: Any, qid: str) -> Answer:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise RemoteError(f"{qid}: no probability in [0, 1]")
    return Answer("noul", {"true": float(p), "false": 1.0 - float(p)})


@dataclass
class _RemoteClient:
    """What the three clients share: where the server is, the key, the budget, the usage,
    and one JSON call (`_call`)."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = BUDGET_S
    usage: Usage = field(default_factory=Usage)
    kind: ClassVar[str] = ""

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.model}"

    def _call(self, path: str, body: dict, timeout_s: float | None = None) -> dict:
        """POST `body` as JSON to `base_url + path` (bearer key, no retries), count the usage
        it reports, and return the JSON answer; `RemoteError` for anything else."""
        import httpx

        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        headers = {"Accept": "application/json", **({"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})}
        try:
            r = httpx.post(f"{self.base_url.rstrip('/')}{path}", json=body, headers=headers,
                           timeout=httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s)))
        except httpx.TimeoutException:
            raise RemoteError(f"no answer within {timeout_s:.1f} s") from None
        except httpx.HTTPError as exc:
            raise RemoteError(f"unreachable ({type(exc).__name__})") from None
        if r.status_code == 429:
            raise RemoteError(f"HTTP 429, rate limited (retry after {r.headers.get('retry-after', '?')} s)")
        if r.status_code != 200:
            raise RemoteError(f"HTTP {r.status_code}")
        try:
            data = r.json()
        except ValueError:
            raise RemoteError("the answer is not JSON") from None
        if not isinstance(data, dict):
            raise RemoteError("the answer is not a JSON object")
        self.usage.add(data.get("usage"))
        return data


@dataclass
class SystemOneModel(_RemoteClient):
    """A System One server (`POST {base_url}/v1/systemone`)."""

    model: str = "jev-latest"
    kind: ClassVar[str] = "systemone"

    def decide(self, request: Request) -> dict[str, Answer]:
        """All the request's questions in one call. Raises `RemoteError`."""
        body = {"model": self.model, "state": masked(dict(request.state)),
                "questions": {qid: q.to_wire() for qid, q in request.questions.items()}}
        data = self._call("/v1/systemone", body)
        answers = data.get("answers")
        if not isinstance(answers, Mapping):
            raise RemoteError("no answers in the reply")
        out = {}
        for qid, q in request.questions.items():
            a = answers.get(qid)
            if not isinstance(a, Mapping):
                raise RemoteError(f"{qid}: not answered")
            out[qid] = _noul(q, a.get("noul"), qid) if q.type == "noul" else _probabilities(q, a.get("probabilities") or {}, qid)
        return out


@dataclass
class DecisionsModel(_RemoteClient):
    """OpenAI's Decisions API (`POST {base_url}/v1/decisions`)."""

    model: str = "gpt-6-luna"
    usage: Usage = field(default_factory=lambda: Usage(price_per_mtok=0.10))
    kind: ClassVar[str] = "decisions"

    def decide(self, request: Request) -> dict[str, Answer]:
        """All the request's questions in one call, in order. Raises `RemoteError`, and
        `UnsupportedQuestion` for a score question (memsift asks none)."""
        questions = []
        for qid, q in request.questions.items():
            if q.type == "choice":
                questions.append({"type": "choice", "name": qid, "instructions": q.instructions,
                                  "choices": [{"value": k, **({"description": v} if v else {})} for k, v in q.criteria.items()]})
            elif q.type == "noul":
                questions.append({"type": "predicate", "name": qid, "instructions": q.instructions})
            else:
                raise UnsupportedQuestion(qid)
        body = {"model": self.model, "input": json.dumps(masked(dict(request.state)), ensure_ascii=False),
                "questions": questions}
        data = self._call("/v1/decisions", body)
        answers = data.get("answers")
        if not isinstance(answers, list) or len(answers) != len(questions):
            raise RemoteError("the reply does not answer every question")
        out = {}
        for (qid, q), a in zip(request.questions.items(), answers):
            if not isinstance(a, Mapping) or a.get("type") == "refusal":
                raise RemoteError(f"{qid}: refused")
            if q.type == "noul":
                out[qid] = _noul(q, a.get("probability"), qid)
            else:
                raw = {p.get("value"): p.get("probability") for p in a.get("probabilities") or [] if isinstance(p, Mapping)}
                out[qid] = _probabilities(q, raw, qid)
        return out


@dataclass
class LogprobModel(_RemoteClient):
    """An OpenAI-compatible chat/completions server that returns `top_logprobs` (OpenAI,
    vLLM, llama.cpp; see the research note for each server's quirks)."""

    usage: Usage = field(default_factory=lambda: Usage(price_per_mtok=0.0))
    kind: ClassVar[str] = "logprobs"

    def prompt(self, state: Mapping[str, Any], question: Question) -> tuple[str, list[str]]:
        """The prompt for one question and its option keys in letter order."""
        if question.type == "noul":
            keys, lines = ["true", "false"], [f"A. yes: {question.criteria.get('true') or 'true'}",
                                             f"B. no: {question.criteria.get('false') or 'false'}"]
        elif question.type == "choice":
            keys = list(question.criteria)
            lines = [f"{LETTERS[i]}. {k}" + (f": {v}" if v else "") for i, (k, v) in enumerate(question.criteria.items())]
        else:
            raise UnsupportedQuestion(question.type)
        if len(keys) > len(LETTERS):
            raise UnsupportedQuestion("more options than letters")
        text = (f"{json.dumps(state, ensure_ascii=False)}\n\n{question.instructions}\n"
                + "\n".join(lines) + "\nAnswer with one letter.")
        return text, keys

    def _one(self, state: Mapping[str, Any], qid: str, question: Question, deadline: float) -> Answer:
        text, keys = self.prompt(state, question)
        body = {"model": self.model, "max_tokens": 1, "temperature": 0, "logprobs": True, "top_logprobs": 20,
                "messages": [{"role": "user", "content": text}]}
        data = self._call("/chat/completions", body, max(0.05, deadline - time.monotonic()))
        try:
            top = data["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise RemoteError(f"{qid}: no top_logprobs in the reply") from None
        mass = dict.fromkeys(keys, 0.0)
        for entry in top if isinstance(top, list) else []:
            letter = str(entry.get("token", "")).strip().upper() if isinstance(entry, Mapping) else ""
            if len(letter) == 1 and letter in LETTERS[: len(keys)]:
                mass[keys[LETTERS.index(letter)]] += math.exp(float(entry.get("logprob", -math.inf)))
        covered = sum(mass.values())
        if covered < MIN_LABEL_COVERAGE:
            raise RemoteError(f"{qid}: the option letters hold {covered:.2f} of the probability")
        return Answer(question.type, {k: v / covered for k, v in mass.items()})

    def decide(self, request: Request) -> dict[str, Answer]:
        """One call per question, in parallel, all within the budget. Raises `RemoteError`."""
        from concurrent.futures import ThreadPoolExecutor

        state = masked(dict(request.state))
        deadline = time.monotonic() + self.timeout_s
        for q in request.questions.values():
            self.prompt(state, q)  # raises UnsupportedQuestion before any call
        with ThreadPoolExecutor(max_workers=min(8, len(request.questions)) or 1) as pool:
            futures = {qid: pool.submit(self._one, state, qid, q, deadline) for qid, q in request.questions.items()}
            return {qid: f.result() for qid, f in futures.items()}


@dataclass
class Calibration:
    """memsift's own calibration of a remote model's probabilities, per question head:
    a temperature for choices (Guo et al. 2017) and Platt's (a, b) for yes/no questions
    (Platt 1999), fitted on memsift's training data (`training/calibrate_remote.py`).
    An empty calibration leaves probabilities as the model gave them."""

    temperature: Mapping[str, float] = field(default_factory=dict)
    platt: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def apply(self, qid: str, answer: Answer) -> Answer:
        head = qid.partition(".")[0]
        if answer.type == "noul" and head in self.platt:
            a, b = self.platt[head]
            p = min(max(answer.noul, 1e-6), 1 - 1e-6)
            q = 1.0 / (1.0 + math.exp(-(a * math.log(p / (1 - p)) + b)))
            return Answer("noul", {"true": q, "false": 1 - q})
        if answer.type == "choice" and head in self.temperature:
            t = self.temperature[head]
            logits = {k: math.log(max(v, 1e-9)) / t for k, v in answer.probabilities.items()}
            top = max(logits.values())
            exp = {k: math.exp(v - top) for k, v in logits.items()}
            total = sum(exp.values())
            return Answer("choice", {k: v / total for k, v in exp.items()})
        return answer


class FallbackModel:
    """A remote model with the embedded one behind it.

    Each request goes to the remote model unless its breaker (`memsift.breaker`, service
    `decision`) is open; on `RemoteError` or `UnsupportedQuestion` the whole request is
    answered by the embedded model instead, so nothing is pasted that the embedded model
    would not paste. `events` records, per request, who answered, why, the time and the
    tokens, for the trace and the logs.
    """

    def __init__(self, remote, embedded, breakers=None, calibration: Calibration | None = None) -> None:
        self.remote, self.embedded, self.breakers = remote, embedded, breakers
        self.calibration = calibration or Calibration()
        self.encoder = embedded.encoder
        self.name = f"{remote.name} (fallback {embedded.name})"
        self.events: list[dict[str, Any]] = []

    def decide(self, request: Request) -> dict[str, Answer]:
        start = time.perf_counter()
        tokens = self.remote.usage.input_tokens
        event: dict[str, Any] = {"questions": len(request.questions)}
        if self.breakers is not None and not self.breakers.allow("decision"):
            event.update(source="embedded", why="remote model paused")
        else:
            try:
                answers = self.remote.decide(request)
            except (RemoteError, UnsupportedQuestion) as exc:
                why = str(exc) if isinstance(exc, RemoteError) else f"unsupported question {exc}"
                event.update(source="embedded", why=why)
                if isinstance(exc, RemoteError) and self.breakers is not None:
                    self.breakers.failure("decision", why)
                log.warning("remote decision model %s failed (%s): the embedded model answers", self.remote.name, why)
            else:
                if self.breakers is not None:
                    self.breakers.success("decision")
                event.update(source=self.remote.name, ms=round((time.perf_counter() - start) * 1000, 1),
                             input_tokens=self.remote.usage.input_tokens - tokens)
                self.events.append(event)
                return {qid: self.calibration.apply(qid, a) for qid, a in answers.items()}
        answers = self.embedded.decide(request)
        event["ms"] = round((time.perf_counter() - start) * 1000, 1)
        self.events.append(event)
        return answers


def load_model(home=None, env: Mapping[str, str] | None = None, *, strict: bool = True):
    """The decision model configured by the environment: the embedded one, or a remote one
    with the embedded one behind it (`FallbackModel`).

    `MEMSIFT_DECISION_API` = `systemone` | `decisions` | `logprobs` (unset: embedded only),
    `MEMSIFT_DECISION_URL` (default `https://api.typesafe.ai` for systemone),
    `MEMSIFT_DECISION_MODEL`, `MEMSIFT_DECISION_KEY` (else `TYPESAFE_API_KEY` /
    `OPENAI_API_KEY`), `MEMSIFT_DECISION_PRICE` (US dollars per million input tokens).
    `home` (the memsift home) holds the breakers and `calibration/<model>.json`. Raises
    `ValueError` for an unknown API or a missing URL or model; with `strict=False` (the
    hooks) it logs that and returns the embedded model instead.
    """
    from pathlib import Path

    from .embedded import EmbeddedChoiceModel

    from ..config import environment

    env = environment() if env is None else env
    embedded = EmbeddedChoiceModel()
    api = env.get("MEMSIFT_DECISION_API", "").strip().lower()
    if not api or api == "embedded":
        return embedded
    url, model, key = env.get("MEMSIFT_DECISION_URL", ""), env.get("MEMSIFT_DECISION_MODEL", ""), env.get("MEMSIFT_DECISION_KEY")
    if api == "systemone":
        remote = SystemOneModel(url or "https://api.typesafe.ai", model or "jev-latest", key or env.get("TYPESAFE_API_KEY"))
    elif api in ("decisions", "logprobs"):
        if not url or (api == "logprobs" and not model):
            error = f"MEMSIFT_DECISION_API={api} needs MEMSIFT_DECISION_URL" + (" and MEMSIFT_DECISION_MODEL" if api == "logprobs" else "")
            if strict:
                raise ValueError(error)
            log.warning("decision model misconfigured (%s): using the embedded model", error)
            return embedded
        cls = DecisionsModel if api == "decisions" else LogprobModel
        remote = cls(url, model or "gpt-6-luna", key or env.get("OPENAI_API_KEY"))
    else:
        error = f"MEMSIFT_DECISION_API={api!r}: use systemone, decisions, logprobs or embedded"
        if strict:
            raise ValueError(error)
        log.warning("decision model misconfigured (%s): using the embedded model", error)
        return embedded
    if env.get("MEMSIFT_DECISION_PRICE"):
        remote.usage.price_per_mtok = float(env["MEMSIFT_DECISION_PRICE"])
    breakers = calibration = None
    if home is not None:
        from ..breaker import Breakers

        breakers = Breakers(Path(home) / "services.sqlite")
        path = Path(home) / "calibration" / f"{remote.name.replace(':', '-').replace('/', '_')}.json"
        if path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            calibration = Calibration(data.get("temperature", {}), {k: tuple(v) for k, v in data.get("platt", {}).items()})
    return FallbackModel(remote, embedded, breakers, calibration)
