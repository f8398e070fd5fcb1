"""The decision-model contract, shaped like the System One wire format.

A `Request` holds a `state` (the text judged, as a JSON-able mapping) and named
`Question`s. Each question is one of:

- `choice`: `criteria` maps option -> one-line description (or None); the answer gives a
  probability per option, summing to 1.
- `noul`: a yes/no question; `criteria` describes "true" and "false"; the answer gives
  {"true": p, "false": 1 - p}.
- `score`: `criteria` is a list of 2-10 level labels; the answer gives a probability per level.

Source of the shapes: the System One API reference (`POST /v1/systemone`), summarised with
examples in the team's research note `decision-model.md`, section A.

`Request.local` carries what only an in-process model can use (precomputed embeddings); a
remote adapter never sends it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal, Mapping, Protocol

QuestionType = Literal["choice", "noul", "score"]


class UnsupportedQuestion(LookupError):
    """The model has no way to answer this question id."""


@dataclass(frozen=True)
class Question:
    """One named question: `type`, `instructions` and `criteria` as on the wire."""

    type: QuestionType
    instructions: str
    criteria: Mapping[str, str | None] | tuple[str, ...]

    def options(self) -> list[str]:
        """The option keys an answer gives probabilities for."""
        if self.type == "noul":
            return ["true", "false"]
        if self.type == "score":
            return [str(i) for i in range(len(self.criteria))]
        return list(self.criteria)

    def to_wire(self) -> dict[str, Any]:
        crit = list(self.criteria) if self.type == "score" else dict(self.criteria)
        return {"type": self.type, "instructions": self.instructions, "criteria": crit}


@dataclass(frozen=True)
class Request:
    """A `state` and the questions asked about it; `local` never leaves the process."""

    state: Mapping[str, Any]
    questions: Mapping[str, Question]
    local: Mapping[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {
            "state": dict(self.state),
            "questions": {qid: q.to_wire() for qid, q in self.questions.items()},
        }


@dataclass(frozen=True)
class Answer:
    """Probabilities per option of one question (they sum to 1)."""

    type: QuestionType
    probabilities: Mapping[str, float]

    @property
    def choice(self) -> str:
        """The most probable option."""
        return max(self.probabilities, key=self.probabilities.__getitem__)

    @property
    def noul(self) -> float:
        """P(true) for a `noul` question."""
        return float(self.probabilities.get("true", 0.0))

    def p(self, *options: str) -> float:
        """Summed probability of the given options."""
        return float(sum(self.probabilities.get(o, 0.0) for o in options))


class ChoiceModel(Protocol):
    """Anything that answers System One questions.

    `decide` returns one `Answer` per question id of the request, and raises
    `UnsupportedQuestion` for a question it cannot answer.
    """

    name: str

    def decide(self, request: Request) -> dict[str, Answer]: ...


@dataclass(frozen=True)
class PromptFile:
    """A memsift question as shipped in `memsift/prompts/<id>.json`."""

    id: str
    question: Question
    extra: Mapping[str, Any]

    def for_item(self, i: int) -> Question:
        """The question with `{i}` in its instructions filled in (one item per question)."""
        q = self.question
        return Question(q.type, q.instructions.replace("{i}", str(i)), q.criteria)


_PROMPTS: dict[str, PromptFile] = {}


def load_question(question_id: str) -> PromptFile:
    """Load a question file from the `memsift.prompts` package data (cached).

    Raises `FileNotFoundError` for an unknown id.
    """
    if question_id not in _PROMPTS:
        path = resources.files("memsift.prompts").joinpath(f"{question_id}.json")
        data = json.loads(path.read_text(encoding="utf-8"))
        crit = data["criteria"]
        question = Question(
            type=data["type"],
            instructions=data["instructions"],
            criteria=tuple(crit) if data["type"] == "score" else dict(crit),
        )
        extra = {k: v for k, v in data.items() if k not in {"id", "type", "instructions", "criteria"}}
        _PROMPTS[question_id] = PromptFile(data["id"], question, extra)
    return _PROMPTS[question_id]
