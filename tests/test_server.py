"""The warm server (`memsift serve`) behind the prompt hook, as real processes: the same
answers as in-process recall, and every way it can fail leaving the prompt its answer."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memsift.client import ServerUnavailable, ask, socket_path

from .conftest import REPO, run_memsift
from .test_hook import ASK, NOTE, log_text, project  # noqa: F401  (project: the fixture)
from .test_hook import payload as hook_payload


def payload(prompt, cwd, session="s-1"):
    return hook_payload(prompt, cwd, session_id=session)


def hook(stdin: bytes, **env):
    return run_memsift("hook", "user-prompt-submit", stdin=stdin, env=env)


def server_pid(home) -> int | None:
    try:
        return ask("status", str(home))["pid"]
    except ServerUnavailable:
        return None


def wait_for(condition, timeout: float = 30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    return condition()


def test_the_server_answers_as_in_process_recall_does(tmp_path, memsift_home, warm_server):
    """A dev conversation's notes and passages, each of its first 16 prompts through the hook
    without the server and through it (in another session, so the ledger starts afresh)."""
    from memsift.backends import Passage
    from memsift.backends.sqlite import SQLiteBackend
    from memsift.classifiers.encoders import load_encoder
    from memsift.config import project_dir, project_root
    from memsift.notes import Note, NoteStore

    conv = json.loads(sorted((REPO / "eval" / "conversations").glob("*.json"))[0].read_text())
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    encoder = load_encoder()
    folder = project_dir(project_root(project), memsift_home)
    NoteStore(folder, project.name, encoder=encoder).add(
        [Note(n["id"], n["date"], n["kind"], n["text"]) for n in sorted(conv["notes"], key=lambda n: n["date"])])
    backend = SQLiteBackend(folder / "passages.sqlite", encoder)
    backend.add([Passage(p["id"], p["date"], p["text"]) for p in conv["passages"]])
    backend.close()
    prompts = [t["user"] for t in conv["turns"][:16]]
    alone = [hook(payload(p, project, "alone"), MEMSIFT_SERVER="off").stdout for p in prompts]
    warm_server()
    warm = [hook(payload(p, project, "warm")).stdout for p in prompts]
    assert warm == alone and any(alone)
    assert log_text(memsift_home).count("(memsift serve)") == len(prompts)  # every one answered by the server

    # the server records each run once the answer is out: the same rows as in-process
    from memsift.runlog import RunLog

    def pasted(session):
        runs = RunLog(memsift_home / "runs.sqlite", readonly=True)
        try:
            return [r["pasted"] for r in runs.last(100) if r["session"] == session]
        finally:
            runs.close()

    assert wait_for(lambda: len(pasted("warm")) == len(prompts), 10)
    assert pasted("warm") == pasted("alone")


def test_a_prompt_with_no_server_recalls_in_process_and_starts_one(project, memsift_home, warm_server):
    done = hook(payload(ASK, project))
    assert done.returncode == 0 and b"N001" in done.stdout
    assert "memsift serve: not running" in log_text(memsift_home)
    pid = wait_for(lambda: server_pid(memsift_home), 60)
    assert pid
    again = hook(payload(ASK, project, "s-2"))
    assert b"N001" in again.stdout and "(memsift serve)" in log_text(memsift_home)


def test_a_killed_server_and_its_stale_socket(project, memsift_home, warm_server):
    pid = warm_server()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: server_pid(memsift_home) is None)
    assert Path(socket_path(str(memsift_home))).exists()  # left behind
    done = hook(payload(ASK, project))
    assert b"N001" in done.stdout and "connect: ConnectionRefusedError" in log_text(memsift_home)
    new = wait_for(lambda: server_pid(memsift_home), 60)  # the next server took the stale socket's place
    assert new and new != pid


def test_a_hung_server_costs_the_prompt_half_a_second(project, memsift_home, warm_server):
    pid = warm_server()
    os.kill(pid, signal.SIGSTOP)
    try:
        start = time.perf_counter()
        done = hook(payload(ASK, project))
        took = time.perf_counter() - start
        assert b"N001" in done.stdout and "memsift serve: timed out" in log_text(memsift_home)
        assert took < 30  # the hook's budget (10 s) is what matters; this is a correctness bound, not a timing
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_server_killed_mid_request(project, memsift_home, warm_server, monkeypatch):
    """A server that dies between acknowledging a request and answering it."""
    folder = memsift_home / "serve"
    folder.mkdir(parents=True, mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path(str(memsift_home)))
    os.chmod(socket_path(str(memsift_home)), 0o600)
    listener.listen(1)
    proc = subprocess.Popen([sys.executable, "-m", "memsift", "hook", "user-prompt-submit"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env={**os.environ, "MEMSIFT_SERVER": "on"})
    proc.stdin.write(payload(ASK, project))
    proc.stdin.close()
    conn, _ = listener.accept()
    conn.makefile("rb").readline()
    conn.sendall(b"ack\n")
    conn.close()  # dies before answering
    listener.close()
    assert proc.wait(timeout=120) == 0 and b"N001" in proc.stdout.read()
    assert "memsift serve: bad answer" in log_text(memsift_home)


def test_two_servers_started_at_once_make_one(memsift_home, warm_server):
    procs = [subprocess.Popen([sys.executable, "-m", "memsift", "serve"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(2)]
    pid = wait_for(lambda: server_pid(memsift_home), 60)
    exited = wait_for(lambda: [p for p in procs if p.poll() is not None], 30)
    assert len(exited) == 1 and exited[0].returncode == 0
    assert pid == next(p.pid for p in procs if p.poll() is None)


def test_ten_hooks_at_once(project, memsift_home, warm_server):
    warm_server()
    procs = [subprocess.Popen([sys.executable, "-m", "memsift", "hook", "user-prompt-submit"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE) for _ in range(10)]
    for n, proc in enumerate(procs):
        proc.stdin.write(payload(ASK, project, f"ten-{n}"))
        proc.stdin.close()
    outs = [proc.stdout.read() for proc in procs]
    assert [proc.wait(timeout=120) for proc in procs] == [0] * 10
    assert all(b"N001" in out for out in outs)
    assert log_text(memsift_home).count("(memsift serve)") == 10


def test_a_socket_open_to_others_is_refused(project, memsift_home, warm_server):
    warm_server()
    os.chmod(socket_path(str(memsift_home)), 0o666)
    done = hook(payload(ASK, project))
    assert b"N001" in done.stdout
    assert "is open to other users (mode 666): refused" in log_text(memsift_home)
    assert "(memsift serve)" not in log_text(memsift_home)


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_a_socket_of_another_user_is_refused(project, memsift_home, warm_server):
    warm_server()
    os.chown(socket_path(str(memsift_home)), 65534, -1)  # nobody
    done = hook(payload(ASK, project))
    assert b"N001" in done.stdout and "belongs to another user (uid 65534): refused" in log_text(memsift_home)


def test_after_an_upgrade_the_old_server_is_not_used(project, memsift_home, warm_server):
    pid = warm_server()
    source = REPO / "memsift" / "__init__.py"
    before = source.stat()
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))  # as an edit or an upgrade would
    try:
        done = hook(payload(ASK, project))
        assert b"N001" in done.stdout and "outdated" in log_text(memsift_home)
        assert wait_for(lambda: not _alive(pid), 30)  # the old server left
        new = wait_for(lambda: server_pid(memsift_home), 60)
        assert new and new != pid
    finally:
        os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return not Path(f"/proc/{pid}/status").exists() or "zombie" not in Path(f"/proc/{pid}/status").read_text()


def test_idle_exit_status_and_stop(memsift_home, warm_server, monkeypatch):
    monkeypatch.setenv("MEMSIFT_SERVE_IDLE", "1")
    pid = warm_server()
    assert wait_for(lambda: not _alive(pid), 30)
    monkeypatch.setenv("MEMSIFT_SERVE_IDLE", "600")
    pid = warm_server()
    status = run_memsift("status")
    assert f"server     pid {pid}" in status.stdout.decode()
    assert run_memsift("serve", "--stop").stdout.decode().strip() == "memsift serve: stopped"
    assert wait_for(lambda: not _alive(pid), 30)
    assert "server     not running" in run_memsift("status").stdout.decode()


def test_the_default_home_gets_its_server_too(tmp_path, project, memsift_home):
    """No MEMSIFT_HOME at all (the usual case): the server the hook starts is the one the next
    prompt's hook uses."""
    home = tmp_path / "user"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MEMSIFT_HOME", "MEMSIFT_SERVER")}
    env["HOME"] = str(home)
    run = lambda session: subprocess.run([sys.executable, "-m", "memsift", "hook", "user-prompt-submit"],  # noqa: E731
                                         input=payload(ASK, project, session), capture_output=True, env=env, timeout=120)
    # the note lives in the test's home: seed the default one the same way
    added = subprocess.run([sys.executable, "-m", "memsift", "notes", "add", "--project", str(project), "--kind",
                            "decision", "--date", "2026-09-01", NOTE], capture_output=True, env=env)
    assert added.returncode == 0, added.stderr
    default = home / ".memsift"
    try:
        assert b"N001" in run("d-1").stdout
        assert wait_for(lambda: server_pid(default), 60)
        assert b"N001" in run("d-2").stdout
        assert "(memsift serve)" in log_text(default)
    finally:
        subprocess.run([sys.executable, "-m", "memsift", "serve", "--stop"], env=env, capture_output=True)


def test_a_client_of_another_protocol_is_refused_and_the_server_goes_on(project, memsift_home, warm_server):
    """A hook of an older install (protocol 1 sent JSON lines) meets a server of this one."""
    pid = warm_server()
    for line in (b'{"v": 1, "op": "hook"}\n', b"memsift 1 hook x y 0\n"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(socket_path(str(memsift_home)))
        sock.sendall(line)
        got = sock.makefile("rb").read()
        sock.close()
        assert not got.startswith(b"ack")  # never answered: the old client recalls in its own process
    assert b"protocol 1, this server speaks 2" in got
    assert server_pid(memsift_home) == pid
    assert b"N001" in hook(payload(ASK, project)).stdout and "(memsift serve)" in log_text(memsift_home)
