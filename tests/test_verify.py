"""The verifier on real git repositories made here: claims that fail, hold, and come back."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess

import pytest

from memsift.config import project_dir
from memsift.notes import Note, NoteStore
from memsift.revision import history, undo
from memsift.verify import Claim, claims, verify
from .conftest import run_memsift

DAY = dt.date(2026, 12, 2)
GIT_ENV = {"GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "Test",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


@pytest.fixture
def repo(tmp_path):
    """A git repository: src/pay.py, a package.json with scripts build and deploy, a Makefile
    with test, a settings file naming PAYMENTS_URL, and a branch release-2 beside main."""
    root = tmp_path / "shop"
    (root / "src").mkdir(parents=True)
    (root / "src" / "pay.py").write_text("def pay(): ...\n")
    (root / "package.json").write_text(json.dumps({"scripts": {"build": "tsc", "deploy": "./deploy.sh"}}))
    (root / "Makefile").write_text("test:\n\tpytest\n")
    (root / "settings.py").write_text("import os\nURL = os.environ['PAYMENTS_URL']\n")
    git(tmp_path, "init", "-q", "-b", "main", str(root))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "start")
    git(root, "branch", "release-2")
    return root


def store_for(root, encoder, notes):
    store = NoteStore(project_dir(root), root.name, encoder=encoder)
    store.add(notes, link_supersession=False)
    return store


def by_id(store):
    return {n.id: n for n in store.notes()}


def test_claims_are_extracted_conservatively():
    assert set(claims("The payment code lives in `src/pay.py`; deploy with `npm run deploy` from branch "
                      "`release-2`. Set `PAYMENTS_URL`.")) == {
        Claim("branch", "release-2"), Claim("script", "npm run deploy"), Claim("env", "PAYMENTS_URL"),
        Claim("path", "src/pay.py")}
    # gone, renamed, future or negated: no claim that the path exists now
    assert claims("We removed `src/old.py`.") == []
    assert claims("`lib/util.py` was renamed to `lib/helpers.py`.") == []
    assert claims("We will create `src/new.py` later.") == []
    # prose, products, URLs, well-known variables, build output: not claims
    assert claims("Make sure the Node.js build passes; see https://example.com/docs/a.py.") == []
    assert claims("We use `Node.js` 20, `origin/main` and `PATH`, `XDG_CONFIG_HOME`, `dist/app.js`.") == []
    assert claims("Payments: Adyen chosen over Stripe because of SEPA direct debit.") == []


def test_a_path_renamed_in_a_commit_is_flagged_and_undo_reverts_it(repo, encoder):
    store = store_for(repo, encoder, [Note("N1", "2026-11-01", "context", "The payment code lives in `src/pay.py`.")])
    before = store.markdown.read_bytes()
    git(repo, "mv", "src/pay.py", "src/payments.py")
    git(repo, "commit", "-q", "-m", "rename")
    report = verify(store, repo, today=DAY)
    assert report.failed == {"N1": "path src/pay.py not found, 2026-12-02"}
    assert by_id(store)["N1"].unverified == "path src/pay.py not found, 2026-12-02"
    after = store.markdown.read_bytes()
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert changed == [(b"## N1 \xc2\xb7 2026-11-01 \xc2\xb7 context",
                        b"## N1 \xc2\xb7 2026-11-01 \xc2\xb7 context \xc2\xb7 unverified (path src/pay.py not found, 2026-12-02)")]
    assert history(store)[-1].backend == "verifier"
    # the same failure the next session: the file is not written again
    assert verify(store, repo, today=DAY + dt.timedelta(days=1)).revision is None
    undo(store)
    assert store.markdown.read_bytes() == before
    # undone: the same failure is not flagged again (the user said the note is fine)
    again = verify(store, repo, today=DAY)
    assert again.revision is None and again.dismissed == {"N1": "path src/pay.py not found"}
    assert store.markdown.read_bytes() == before


def test_a_deleted_branch_is_flagged_and_a_check_that_passes_clears_it(repo, encoder):
    store = store_for(repo, encoder, [Note("N1", "2026-11-01", "convention", "Hotfixes go on the `release-2` branch.")])
    assert verify(store, repo, today=DAY).failed == {}
    git(repo, "branch", "-D", "release-2")
    assert verify(store, repo, today=DAY).failed == {"N1": "branch release-2 not found, 2026-12-02"}
    git(repo, "branch", "release-2")
    report = verify(store, repo, today=DAY)
    assert report.cleared == ["N1"] and by_id(store)["N1"].unverified is None


def test_a_script_removed_from_package_json_is_flagged(repo, encoder):
    store = store_for(repo, encoder, [
        Note("N1", "2026-11-01", "convention", "Deploy with `npm run deploy`."),
        Note("N2", "2026-11-02", "convention", "Run the tests with `make test`."),
    ])
    (repo / "package.json").write_text(json.dumps({"scripts": {"build": "tsc"}}))
    git(repo, "commit", "-qam", "drop deploy")
    report = verify(store, repo, today=DAY)
    assert report.failed == {"N1": "script 'npm run deploy' not defined, 2026-12-02"}
    assert by_id(store)["N2"].unverified is None


def test_claims_that_hold_and_notes_without_claims_change_nothing(repo, encoder):
    store = store_for(repo, encoder, [
        Note("N1", "2026-11-01", "context", "Payments read `PAYMENTS_URL` in `src/pay.py`; build with `npm run build`."),
        Note("N2", "2026-11-02", "decision", "Payments: Adyen chosen over Stripe because of SEPA direct debit."),
        Note("N3", "2026-11-03", "context", "The pay module is `pay.py`."),  # a bare name, found under src/
    ])
    before = store.markdown.read_bytes()
    report = verify(store, repo, today=DAY)
    assert report.failed == {} and report.revision is None
    assert (report.checked, report.without_claims) == (2, 1)
    assert store.markdown.read_bytes() == before


def test_an_env_var_no_file_names_is_flagged(repo, encoder):
    store = store_for(repo, encoder, [Note("N1", "2026-11-01", "context", "The key is read from `$PAYMENTS_TOKEN`.")])
    assert verify(store, repo, today=DAY).failed == {"N1": "variable PAYMENTS_TOKEN not named in the project, 2026-12-02"}


def test_notes_verify_and_list_and_show(repo, encoder, tmp_path):
    empty = run_memsift("notes", "verify", "--project", str(repo))
    assert empty.returncode == 0 and b"no notes to verify" in empty.stdout
    store = store_for(repo, encoder, [Note("N1", "2026-11-01", "context", "The payment code lives in `src/pay.py`.")])
    (repo / "src" / "pay.py").unlink()
    out = run_memsift("notes", "verify", "--project", str(repo), env={"MEMSIFT_ENCODER": "hashing-v1"})
    assert out.returncode == 0, out.stderr
    assert b"N1: unverified (path src/pay.py not found, " in out.stdout
    listed = run_memsift("notes", "list", "--project", str(repo)).stdout.decode()
    assert "N1 · 2026-11-01 · context (unverified: path src/pay.py not found, " in listed
    status = run_memsift("status", "--project", str(repo)).stdout.decode()
    assert "notes      1 active, 0 superseded, 1 unverified (memsift notes list)" in status
    assert history(store)[-1].backend == "verifier"


def test_an_unverified_note_is_pasted_with_its_status_in_its_frame(repo, encoder, scripted):
    from memsift.recall import Recaller

    store = store_for(repo, encoder, [Note("N1", "2026-11-01", "context", "The payment code lives in `src/pay.py`.")])
    (repo / "src" / "pay.py").unlink()
    verify(store, repo, today=DAY)
    result = Recaller(scripted(answers={"N1": 0.9}), encoder, store, None, today=DAY).recall("where is the payment code?")
    assert ("[memsift note N1 · 2026-11-01 · context · unverified (path src/pay.py not found, 2026-12-02)] "
            "The payment code lives in `src/pay.py`.") in result.text


def test_the_session_start_sweep_verifies_in_its_own_process(repo, encoder):
    """What the session-start hook detaches (`memsift capture --sweep`) runs the verifier."""
    store = store_for(repo, encoder, [Note("N1", "2026-11-01", "context", "Hotfixes go on the `release-2` branch.")])
    git(repo, "branch", "-D", "release-2")
    out = run_memsift("capture", "--log", f"--cwd={repo}", "--sweep", "--exclude=s1",
                      env={"MEMSIFT_ENCODER": "hashing-v1"})
    assert out.returncode == 0, out.stderr
    assert by_id(store)["N1"].unverified.startswith("branch release-2 not found, ")


def test_a_verifier_failure_is_logged_and_the_sweep_goes_on(repo, encoder, monkeypatch, memsift_home, caplog):
    from memsift import capture, verify as verify_module

    store_for(repo, encoder, [Note("N1", "2026-11-01", "context", "The code is in `src/pay.py`.")])

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(verify_module, "verify", broken)
    capture._verify(repo, memsift_home)  # raises nothing
    assert "verifying the notes" in caplog.text


def test_undo_of_a_status_keeps_the_notes_added_since(repo, encoder):
    store = store_for(repo, encoder, [Note("N1", "2026-11-01", "context", "The payment code lives in `src/pay.py`.")])
    (repo / "src" / "pay.py").unlink()
    verify(store, repo, today=DAY)
    store.add([Note("N2", "2026-12-02", "decision", "Refunds: issued within 14 days, by the support team.")],
              link_supersession=False)
    undo(store)
    notes = by_id(store)
    assert notes["N1"].unverified is None and "N2" in notes


def test_a_status_stays_last_when_a_note_is_superseded(repo, encoder):
    from memsift.revision import Supersede, revise

    store = store_for(repo, encoder, [
        Note("N1", "2026-11-01", "context", "The payment code lives in `src/pay.py`.", session="s1"),
        Note("N2", "2026-11-20", "context", "The payment code moved to the billing service.", session="s2"),
    ])
    (repo / "src" / "pay.py").unlink()
    verify(store, repo, today=DAY)
    revise(store, [Supersede("N1", "N2")], backend="test")
    header = next(line for line in store.markdown.read_text(encoding="utf-8").splitlines() if line.startswith("## N1"))
    assert header == ("## N1 · 2026-11-01 · context · session s1 · superseded by N2 · "
                      "unverified (path src/pay.py not found, 2026-12-02)")
    assert by_id(store)["N1"].superseded_by == "N2"


def test_an_index_of_the_earlier_layout_is_rewritten_without_embedding(tmp_path, encoder, scripted):
    import sqlite3

    from memsift.recall import Recaller

    store = NoteStore(tmp_path / "notes", "shop", encoder=encoder)
    store.add([Note("N1", "2026-11-01", "decision", "Payments: Adyen chosen over Stripe because of SEPA.")])
    with sqlite3.connect(store.index_path) as db:  # as an index written before the layout had a schema
        db.execute("DELETE FROM meta WHERE key = 'schema'")
        db.execute("ALTER TABLE notes DROP COLUMN session")
        db.execute("ALTER TABLE notes DROP COLUMN unverified")
    result = Recaller(scripted(answers={"N1": 0.9}), encoder, store, None).recall("which payment provider?")
    assert [i.id for i in result.items] == ["N1"]
    with sqlite3.connect(store.index_path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == ("2",)


def test_the_prompt_path_never_imports_the_verifier():
    import sys

    code = ("import sys, memsift.hook, memsift.recall, memsift.client; "
            "print(sorted(m for m in sys.modules if m in ('memsift.verify', 'tomllib', 'subprocess')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "memsift.verify" not in out.stdout


def test_a_named_pipe_or_a_path_too_long_never_stops_the_check(repo, encoder):
    """A FIFO in the project (also one named package.json) is never opened, and a claim the
    file system cannot answer (a name too long) is "cannot tell": the other notes are checked."""
    import time

    os.mkfifo(repo / "aaa_pipe")
    (repo / "app").mkdir()
    os.mkfifo(repo / "app" / "package.json")
    store = store_for(repo, encoder, [
        Note("N1", "2026-11-01", "context", "The key is read from `$PAYMENTS_TOKEN`."),
        Note("N2", "2026-11-01", "context", f"Output goes to `{'a' * 300}/out.py`."),
        Note("N3", "2026-11-01", "context", "Deploy with `npm run ship`."),
    ])
    start = time.monotonic()
    report = verify(store, repo, today=DAY)
    assert time.monotonic() - start < 10
    assert set(report.failed) == {"N1", "N3"}


def test_what_is_not_a_claim_in_french_german_and_other_wordings():
    for text in ("Le fichier `src/legacy_pay.py` a été supprimé.", "Die alte Datei `src/legacy_pay.py` gibt es nicht mehr.",
                 "The branch `tmp` can go.", "Next step: write `docs/onboarding.md`.", "Is `src/maybe.py` still used?",
                 "See github.com/acme/handbook/blob/main/deploy/runbook.md for the runbook.",
                 "In the billing-api repo, the handler is `app/handlers/invoice.py`.",
                 "To add one:\n```\nmkdir -p src/pay/newprov && touch src/pay/newprov/client.py\n```",
                 "Run `uv run manage.py makemigrations`.", "Set `DOCKER_HOST` and `TERM_PROGRAM` first."):
        assert claims(text) == [], text
    assert claims("Build with `make build/app.bin`.") == [Claim("script", "make build/app.bin")]
    assert claims("The payment code lives in `src/pay.py`.") == [Claim("path", "src/pay.py")]
