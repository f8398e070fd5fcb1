"""The CLI where the ground gives way: a deleted working directory, a read-only or full
memsift home, an unreadable notes file, a failed capture, and the messages the user reads.

Everything runs as real `python -m memsift` processes. A read-only or full home is a real
tmpfs (remounted read-only, or filled up), since the tests run as root, where chmod does
not stop writes; where mounting is not allowed the test skips and says why.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memsift.backends import Passage
from memsift.backends.sqlite import SQLiteBackend
from memsift.breaker import Breakers
from memsift.classifiers.encoders import HashingEncoder
from memsift.config import project_dir

from .conftest import run_memsift
from .test_capture import DECISION, claude_lines, write_jsonl

FAST = {"MEMSIFT_ENCODER": "hashing-v1"}  # real vectors, no model load
NOTE = "Payments: Adyen chosen over Stripe because Stripe lacked SEPA direct debit."


def make_project(tmp_path: Path) -> Path:
    project = tmp_path / "shop"
    (project / ".git").mkdir(parents=True)
    done = run_memsift("notes", "add", "--project", str(project), "--kind", "decision", NOTE, env=FAST)
    assert done.returncode == 0, done.stderr
    return project


def in_deleted_cwd(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m memsift args` started in a folder deleted just before (as when a shell's
    folder is removed under it)."""
    command = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "memsift", *args))
    return subprocess.run(["sh", "-c", f"mkdir gone && cd gone && rmdir ../gone && exec {command}"], cwd=tmp_path,
                          capture_output=True, timeout=120, env={**os.environ, **FAST, **(env or {})})


def no_traceback(done: subprocess.CompletedProcess) -> str:
    err = done.stderr.decode()
    assert "Traceback" not in err, err
    return err


def wait_for(predicate, what: str, timeout: float = 60.0):
    """Poll until `predicate()` is truthy (a bound on a detached process, not a timing)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"never happened: {what}")


# --- a working directory deleted under the process ----------------------------------------

def test_status_log_doctor_and_help_work_in_a_deleted_folder(tmp_path, memsift_home):
    make_project(tmp_path)
    status = in_deleted_cwd(tmp_path, "status")
    assert status.returncode == 0 and no_traceback(status) == ""
    out = status.stdout.decode()
    assert "the current folder no longer exists" in out and "paused     no" in out
    log = in_deleted_cwd(tmp_path, "log")
    assert log.returncode == 0 and no_traceback(log) == "" and b"no hook runs logged yet" in log.stdout
    doctor = in_deleted_cwd(tmp_path, "doctor")
    no_traceback(doctor)
    assert b"python" in doctor.stdout and b"the current folder no longer exists" in doctor.stdout
    help_ = in_deleted_cwd(tmp_path, "--help")
    assert help_.returncode == 0 and b"usage: memsift" in help_.stdout


@pytest.mark.parametrize("args, name, option", [
    (("notes", "add", "--kind", "decision", "x"), "memsift notes add", "--project"),
    (("notes", "list"), "memsift notes list", "--project"),
    (("recall", "why Adyen?"), "memsift recall", "--project"),
    (("capture", "--transcript", "t.jsonl", "--session", "s"), "memsift capture", "--cwd"),
])
def test_commands_that_need_a_folder_say_so_in_one_line(tmp_path, args, name, option):
    done = in_deleted_cwd(tmp_path, *args)
    err = no_traceback(done)
    assert done.returncode == 1 and err.count("\n") == 1
    assert err.startswith(f"{name}: the current folder no longer exists") and option in err


def test_an_explicit_project_works_from_a_deleted_folder(tmp_path):
    project = make_project(tmp_path)
    done = in_deleted_cwd(tmp_path, "notes", "list", "--project", str(project))
    assert done.returncode == 0 and NOTE.encode() in done.stdout


def test_the_detached_capture_starts_and_logs_from_a_deleted_folder(tmp_path, memsift_home):
    """The Stop hook runs in a folder deleted since; the capture it detaches works in the
    project's folder from the payload and logs what it did."""
    project = tmp_path / "proj"
    project.mkdir()
    transcript = tmp_path / "s.jsonl"
    write_jsonl(transcript, claude_lines([DECISION, ("thanks", "You're welcome.")]))
    payload = {"session_id": "gone-1", "transcript_path": str(transcript), "cwd": str(project),
               "hook_event_name": "SessionEnd"}
    command = shlex.join([sys.executable, "-m", "memsift", "hook", "session-end"])
    done = subprocess.run(["sh", "-c", f"mkdir gone && cd gone && rmdir ../gone && exec {command}"], cwd=tmp_path,
                          input=json.dumps(payload).encode(), capture_output=True, timeout=60,
                          env={**os.environ, **FAST})
    assert done.returncode == 0 and done.stdout == b""
    log = memsift_home / "logs" / "capture.log"
    text = wait_for(lambda: log.exists() and "capture gone-1: 2 exchanges read" in log.read_text() and log.read_text(),
                    "the detached capture logged its work")
    assert "Traceback" not in text


def test_capture_from_a_deleted_folder_takes_the_project_from_the_transcript(tmp_path, memsift_home):
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    transcript = tmp_path / "s.jsonl"
    lines = claude_lines([DECISION, ("thanks", "You're welcome.")])
    write_jsonl(transcript, [{**line, "cwd": str(project)} for line in lines])
    done = in_deleted_cwd(tmp_path, "capture", "--transcript", str(transcript), "--session", "gone-2", "--final")
    assert done.returncode == 0, no_traceback(done)
    assert b"gone-2: 2 exchanges read" in done.stdout


def test_a_stop_hook_whose_folder_was_deleted_still_captures(tmp_path, memsift_home):
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    transcript = tmp_path / "t" / "s.jsonl"
    transcript.parent.mkdir()
    write_jsonl(transcript, [{**line, "cwd": str(project)} for line in claude_lines([DECISION, ("thanks", "ok")])])
    payload = {"session_id": "gone-3", "transcript_path": str(transcript), "cwd": str(project / "deleted-subdir"),
               "hook_event_name": "SessionEnd"}
    done = run_memsift("hook", "session-end", stdin=json.dumps(payload).encode(), env=FAST)
    assert done.returncode == 0 and done.stdout == b""
    log = memsift_home / "logs" / "capture.log"
    wait_for(lambda: log.exists() and "capture gone-3: 2 exchanges read" in log.read_text(), "the capture ran")


# --- a read-only or full memsift home ---------------------------------------------------

def _mount(args: list[str]) -> None:
    if shutil.which("mount") is None:
        pytest.skip("no mount command here")
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}): needs root")


@pytest.fixture
def tmpfs_home(memsift_home):
    """`MEMSIFT_HOME` on a fresh 4 MiB tmpfs, unmounted after the test."""
    memsift_home.mkdir(parents=True)
    _mount(["-t", "tmpfs", "-o", "size=4m", "tmpfs", str(memsift_home)])
    yield memsift_home
    subprocess.run(["umount", "-l", str(memsift_home)], capture_output=True)


def populate(tmp_path: Path, home: Path) -> Path:
    """A home as a day of use leaves it: a note, a prompt's run, a capture's failure, an
    open breaker, a document in the outbox and a passage."""
    from memsift.outbox import Outbox
    from memsift.runlog import RunLog

    project = make_project(tmp_path)
    payload = {"session_id": "s1", "transcript_path": "", "cwd": str(project), "prompt": "why Adyen over Stripe?"}
    assert run_memsift("hook", "user-prompt-submit", stdin=json.dumps(payload).encode(), env=FAST).returncode == 0
    runs = RunLog(home / "runs.sqlite")
    runs.record("capture", "s2", str(project), error="IsADirectoryError at transcript.py:1")
    runs.close()
    breakers = Breakers(home / "services.sqlite")
    breakers.failure("decision", "timed out")
    breakers.close()
    box = Outbox(home / "outbox.sqlite")
    box.put("memsift_shop", ["User: a\nAssistant: b"])
    box.close()
    backend = SQLiteBackend(project_dir(project, home) / "passages.sqlite", HashingEncoder())
    backend.add([Passage("P1", "2026-05-02", "User: which CDN? Assistant: we stayed on CloudFront.")])
    backend.close()
    return project


def check_reads(project: Path, home: Path) -> None:
    env = {**FAST, "MEMSIFT_DECISION_API": "systemone"}
    status = run_memsift("status", "--project", str(project), env=env)
    assert status.returncode == 0 and no_traceback(status) == ""
    out = status.stdout.decode()
    for line in ("notes      1 active, 0 superseded", "passages   1 (local)", "decision: open since",
                 "outbox     1 waiting", "capture of session s2: IsADirectoryError"):
        assert line in out, out
    log = run_memsift("log", env=env)
    assert log.returncode == 0 and no_traceback(log) == ""
    assert b"pasted" in log.stdout and b"error in capture: IsADirectoryError" in log.stdout
    why = run_memsift("why", "1", env=env)
    assert why.returncode == 0 and b"run 1: user-prompt-submit" in why.stdout


def test_status_log_and_why_read_a_read_only_home(tmp_path, tmpfs_home):
    project = populate(tmp_path, tmpfs_home)
    _mount(["-o", "remount,ro", str(tmpfs_home)])
    with pytest.raises(OSError):
        (tmpfs_home / "probe").write_text("x")
    check_reads(project, tmpfs_home)
    doctor = run_memsift("doctor", "--project", str(project))
    assert doctor.returncode == 1 and no_traceback(doctor) == ""
    assert f"FIX  memsift home {tmpfs_home} is read-only".encode() in doctor.stdout
    pause = run_memsift("pause")  # a write: one line, no traceback
    err = no_traceback(pause)
    assert pause.returncode == 1 and err.startswith("memsift pause: ") and err.count("\n") == 1


def test_status_log_and_why_read_a_full_home(tmp_path, tmpfs_home):
    project = populate(tmp_path, tmpfs_home)
    with open(tmpfs_home / "filler", "wb") as fh, pytest.raises(OSError):
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()
    check_reads(project, tmpfs_home)
    doctor = run_memsift("doctor", "--project", str(project))
    assert doctor.returncode == 1 and no_traceback(doctor) == ""
    assert f"FIX  memsift home {tmpfs_home} is full".encode() in doctor.stdout


def test_a_broken_state_file_is_one_line(tmp_path, memsift_home):
    project = make_project(tmp_path)
    (memsift_home / "runs.sqlite").write_bytes(b"this is not a database, " * 100)
    log = run_memsift("log")
    err = no_traceback(log)
    assert log.returncode == 1 and err.startswith("memsift log: ") and err.count("\n") == 1
    status = run_memsift("status", "--project", str(project))
    no_traceback(status)
    assert status.returncode == 1 and b"runs       unreadable: " in status.stdout
    assert b"notes      1 active" in status.stdout  # the rest still reads


def test_log_and_status_create_nothing_in_a_new_home(tmp_path, memsift_home):
    assert run_memsift("log").returncode == 0
    assert run_memsift("status", "--project", str(tmp_path)).returncode == 0
    assert not (memsift_home / "runs.sqlite").exists()


# --- doctor: the home and the notes file --------------------------------------------------

def test_doctor_checks_the_home_and_the_notes_file(tmp_path, memsift_home):
    project = make_project(tmp_path)
    done = run_memsift("doctor", "--project", str(project))
    assert f"ok   memsift home {memsift_home}: writable".encode() in done.stdout
    assert b"ok   notes: " in done.stdout and b"1 notes, reads cleanly" in done.stdout
    assert not [p for p in memsift_home.iterdir() if p.name.startswith(".doctor")]  # the probe is gone

    notes = project_dir(project, memsift_home) / "notes.md"
    notes.write_text(notes.read_text() + "\n## N002 · someday · decision\nA header that is not one.\n")
    line = notes.read_text().splitlines().index("## N002 · someday · decision") + 1
    done = run_memsift("doctor", "--project", str(project))
    assert done.returncode == 1 and no_traceback(done) == ""
    assert f"FIX  notes: {notes}:{line}: expected".encode() in done.stdout

    notes.write_bytes(notes.read_bytes() + b"\n## N003 \xb7 2026-01-02 \xb7 decision\ncaf\xe9\n")  # Latin-1 bytes
    done = run_memsift("doctor", "--project", str(project))
    assert done.returncode == 1 and no_traceback(done) == ""
    assert [line for line in done.stdout.decode().splitlines() if line.startswith("FIX  notes") and str(notes) in line]


def test_a_failed_detached_capture_shows_in_status(tmp_path, memsift_home):
    project = tmp_path / "proj"
    project.mkdir()
    transcript = tmp_path / "not-a-file.jsonl"
    transcript.mkdir()  # reading it fails
    payload = {"session_id": "broken-1", "transcript_path": str(transcript), "cwd": str(project),
               "hook_event_name": "SessionEnd"}
    assert run_memsift("hook", "session-end", stdin=json.dumps(payload).encode(), env=FAST).returncode == 0
    runs = memsift_home / "runs.sqlite"

    def failed():
        done = run_memsift("status", "--project", str(project))
        return b"capture of session broken-1" in done.stdout and done.stdout.decode()

    out = wait_for(failed, "the capture's failure in status")
    assert "(logs/capture.log)" in out and runs.exists()
    assert "capture failed" in (memsift_home / "logs" / "capture.log").read_text()
    log = run_memsift("log").stdout.decode()
    assert "error in capture: OSError" in log


# --- messages ---------------------------------------------------------------------------

def test_the_remote_model_pause_says_what_is_paused(tmp_path):
    breakers = Breakers(tmp_path / "services.sqlite")
    breakers.failure("decision", "timed out", now=0.0)
    (paused,) = breakers.take_notices("s1")
    assert "remote decision model is paused" in paused and "embedded model" in paused
    assert "memories" not in paused
    breakers.success("decision")
    (resumed,) = breakers.take_notices("s1")
    assert "remote decision model" in resumed and "memories" not in resumed
    breakers.failure("cognee", "connection refused", now=0.0)
    assert "its memories are unavailable" in breakers.take_notices("s1")[0]  # a memory server has some
    breakers.close()


def test_status_shows_a_breaker_only_while_its_service_is_configured(tmp_path, memsift_home):
    project = make_project(tmp_path)
    breakers = Breakers(memsift_home / "services.sqlite")
    breakers.failure("decision", "timed out")
    breakers.failure("cognee", "connection refused")
    breakers.close()
    remote = run_memsift("status", "--project", str(project), env={"MEMSIFT_DECISION_API": "systemone"}).stdout
    assert b"decision: open" in remote and b"cognee: open" not in remote
    (memsift_home / "config.toml").write_text('[decision]\napi = "embedded"\n')
    back = run_memsift("status", "--project", str(project)).stdout
    assert b"decisions  embedded" in back and b"decision: open" not in back
    both = run_memsift("status", "--project", str(project), env={"MEMSIFT_COGNEE_URL": "http://127.0.0.1:9"}).stdout
    assert b"cognee: open" in both and b"decision: open" not in both


def test_notes_add_cuts_what_it_supersedes_with_an_ellipsis(tmp_path):
    project = tmp_path / "p"
    (project / ".git").mkdir(parents=True)
    first = "We chose Adyen over Stripe because Stripe lacked SEPA direct debit back then, for every EU customer."
    second = "Payments moved from Adyen to Mollie; Adyen is no longer used for SEPA direct debit of EU customers."
    for text in (first, second):  # the embedded encoder, which links the two
        done = run_memsift("notes", "add", "--project", str(project), "--kind", "decision", text)
        assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.decode().splitlines() if "supersedes N001: " in line]
    assert lines, done.stdout
    shown = lines[0].split("supersedes N001: ", 1)[1]
    assert shown.endswith("…") and first.startswith(shown[:-1]) and len(shown) <= 70


@pytest.mark.parametrize("args, name", [
    (("notes", "add", "--kind", "decision", "x"), "memsift notes add"),
    (("notes", "list"), "memsift notes list"),
    (("notes", "undo"), "memsift notes undo"),
    (("notes", "revise", "--dry-run"), "memsift notes revise"),
])
def test_errors_name_the_subcommand(tmp_path, args, name):
    done = run_memsift(*args, "--project", str(tmp_path / "no-such-folder"))
    err = no_traceback(done)
    assert done.returncode == 1 and err.startswith(f"{name}: ") and err.count("\n") == 1


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_a_device_as_transcript_is_refused_at_once(tmp_path, memsift_home):
    """A transcript must be a regular file: `/dev/zero` never ends, a FIFO blocks."""
    project = tmp_path / "proj"
    project.mkdir()
    done = run_memsift("capture", "--transcript", "/dev/zero", "--session", "z", "--final", f"--cwd={project}",
                       env=FAST, timeout=60)
    assert done.returncode == 1 and b"/dev/zero is not a regular file" in done.stderr
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    done = run_memsift("capture", "--transcript", str(fifo), "--session", "f", "--final", f"--cwd={project}",
                       env=FAST, timeout=60)
    assert done.returncode == 1 and b"is not a regular file" in done.stderr


def test_an_unknown_hook_event_exits_0_through_the_console_script_too(memsift_home):
    done = subprocess.run([sys.executable, "-c", "import sys; from memsift.cli import main; sys.exit(main())",
                           "hook", "bogus-event"], input=b"{}", capture_output=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert "unknown hook event 'bogus-event'" in (memsift_home / "logs" / "hook.log").read_text()


def test_a_reader_that_stops_early_is_no_error(tmp_path, memsift_home):
    project = make_project(tmp_path)
    for k in range(40):
        run_memsift("notes", "add", "--project", str(project), "--kind", "context", f"Fact {k}: " + "x" * 3000, env=FAST)
    command = shlex.join([sys.executable, "-m", "memsift", "notes", "list", "--project", str(project)])
    done = subprocess.run(["bash", "-c", f"set -o pipefail; {command} | head -c 10 >/dev/null"], capture_output=True,
                          timeout=120, env={**os.environ, **FAST})
    assert done.returncode == 0 and b"Broken pipe" not in done.stderr and b"Traceback" not in done.stderr


def test_an_impossible_date_in_a_header_is_reported(tmp_path, memsift_home):
    project = make_project(tmp_path)
    md = project_dir(project, memsift_home) / "notes.md"
    md.write_text(md.read_text(encoding="utf-8") + "\n## N009 · 2026-13-45 · context\nA note.\n", encoding="utf-8")
    listed = run_memsift("notes", "list", "--project", str(project), env=FAST)
    assert b"date '2026-13-45' is not a date of the calendar" in listed.stderr


@pytest.mark.skipif(sys.platform in ("darwin", "win32"), reason="file names there are always Unicode")
def test_a_project_folder_whose_name_is_not_utf8(tmp_path, memsift_home):
    """A folder name of raw bytes (a Latin-1 archive unpacked on Linux): notes add, list,
    status, doctor and the prompt hook work, and the notes file stays UTF-8."""
    project = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9"))
    (project / ".git").mkdir(parents=True)
    run = lambda *args: subprocess.run([sys.executable, "-m", "memsift", *args], cwd=project,  # noqa: E731
                                       capture_output=True, timeout=120)
    added = run("notes", "add", "--kind", "decision", "--date", "2026-09-01",
                "Payment provider: we chose Adyen over Stripe for SEPA direct debit.")
    assert added.returncode == 0, added.stderr
    notes = next((memsift_home / "projects").glob("caf-*/notes.md"))
    notes.read_bytes().decode("utf-8")  # strict: the file is UTF-8
    listed = run("notes", "list")
    assert listed.returncode == 0 and b"N001" in listed.stdout and not listed.stderr, listed.stderr
    for args in (("status",), ("doctor",)):
        done = run(*args)
        assert b"Traceback" not in done.stderr + done.stdout, done.stderr
    hook = subprocess.run([sys.executable, "-m", "memsift", "hook", "user-prompt-submit"], cwd=project,
                          input=json.dumps({"session_id": "s", "transcript_path": "", "cwd": os.fsdecode(project),
                                            "hook_event_name": "UserPromptSubmit",
                                            "prompt": "why did we pick Adyen?"}, ensure_ascii=True).encode(),
                          capture_output=True, timeout=120)
    assert hook.returncode == 0 and b"Traceback" not in (memsift_home / "logs" / "hook.log").read_bytes()
