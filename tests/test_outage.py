"""Pause on outage: the breaker, the outbox, and the hook against a server that refuses,
hangs, answers slowly, 500 or 401; nothing lost, nothing blocked, the pause told once."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from memsift.breaker import Breakers
from memsift.config import project_dir, project_root
from memsift.outbox import Outbox
from memsift.sync import flush, queue
from memsift.config import CogneeConfig

from .conftest import run_memsift
from .fakecognee import FakeCognee


def test_breaker_opens_probes_and_tells_each_session_once(tmp_path):
    b = Breakers(tmp_path / "s.sqlite", cooldown_s=60)
    assert b.allow("cognee", now=0)
    b.failure("cognee", "connection refused", now=10)
    assert not b.allow("cognee", now=20)
    (paused,) = b.take_notices("s1")
    assert "paused since 1970-01-01 00:00 UTC (connection refused)" in paused and "Local notes still work" in paused
    assert b.take_notices("s1") == []  # once per session
    assert b.allow("cognee", now=71)  # the probe
    assert not b.allow("cognee", now=72)  # only one
    b.failure("cognee", "still refused", now=73)
    assert b.take_notices("s1") == [] and not b.allow("cognee", now=100)
    assert b.allow("cognee", now=134)
    b.success("cognee", now=135)
    assert b.take_notices("s1") == ["memsift: recall from the Cognee memory server has resumed."]
    assert b.take_notices("s2") == []  # s2 never heard of the pause: nothing to tell
    assert b.allow("cognee", now=136) and b.state("cognee").state == "closed"


def test_outbox_is_idempotent_and_backs_off(tmp_path):
    box = Outbox(tmp_path / "o.sqlite")
    assert box.put("ds", ["a", "b", "a"], now=0) == 2 and box.put("ds", ["a"], now=0) == 0
    calls = []

    def down(dataset, docs):
        calls.append(len(docs))
        raise ConnectionError("refused")

    assert box.flush(down, now=1) == (0, "ConnectionError: refused")
    assert box.flush(down, now=2) == (0, None)  # backing off: nothing due, nothing tried
    assert calls == [2]
    got = []
    assert box.flush(lambda ds, docs: got.extend(d.text for d in docs), now=10_000) == (2, None)
    assert sorted(got) == ["a", "b"] and box.pending() == []


@pytest.fixture
def server():
    s = FakeCognee()
    yield s
    s.stop()


@pytest.fixture
def project(tmp_path, memsift_home):
    path = tmp_path / "shop"
    (path / ".git").mkdir(parents=True)
    done = run_memsift("notes", "add", "--project", str(path), "--kind", "decision",
                       "Payments: Adyen chosen over Stripe because Stripe lacked SEPA direct debit.",
                       env={"MEMSIFT_ENCODER": "hashing-v1"})
    assert done.returncode == 0, done.stderr
    return path


def hook(project, server_url, prompt, session="s1"):
    payload = {"session_id": session, "transcript_path": "", "cwd": str(project), "prompt": prompt,
               "hook_event_name": "UserPromptSubmit"}
    start = time.perf_counter()
    done = run_memsift("hook", "user-prompt-submit", stdin=json.dumps(payload).encode(),
                       env={"MEMSIFT_COGNEE_URL": server_url, "MEMSIFT_COGNEE_API_KEY": "test-key"})
    assert done.returncode == 0
    out = json.loads(done.stdout) if done.stdout else {}
    return out, time.perf_counter() - start


RECALL = "did we ever look at how the nightly reconciliation job should retry failed bank webhooks?"


@pytest.mark.parametrize("mode", ["refuse", "500", "401", "slow", "hang"])
def test_outage_pauses_once_and_never_blocks(mode, server, project, memsift_home):
    if mode == "refuse":
        server.stop()
    else:
        server.mode = mode
    server.delay = 13.0  # slower than the 12 s budget
    first, secs = hook(project, server.url, RECALL)
    assert secs < 12 + 8  # the budget plus a process start
    context = first.get("hookSpecificOutput", {}).get("additionalContext", "")
    assert "memsift: recall from the Cognee memory server is paused since" in context
    assert "paused since" in first.get("systemMessage", "")
    second, secs = hook(project, server.url, RECALL)
    assert secs < 8  # skipped at once while the breaker is open
    assert "paused" not in json.dumps(second)  # told once
    assert server.searches <= 1


def test_recovery_is_told_once_and_recall_works_again(server, project, memsift_home):
    server.stop()
    hook(project, server.url, RECALL)
    server.start()
    with sqlite3.connect(memsift_home / "services.sqlite") as db:  # the cool-down has passed
        db.execute("UPDATE breakers SET probe_at = 0")
    out, _ = hook(project, server.url, RECALL)
    assert "has resumed" in out["hookSpecificOutput"]["additionalContext"]
    again, _ = hook(project, server.url, RECALL)
    assert "resumed" not in json.dumps(again)


def test_pushes_wait_in_the_outbox_and_arrive_exactly_once(server, tmp_path):
    home = tmp_path / "home"
    config = CogneeConfig(server.url, api_key="test-key")
    server.stop()
    queue(home, "memsift_shop", ["[memsift note N001 · 2026-11-29 · decision] Adyen over Stripe.",
                                 "[memsift passage N001-x · 2026-11-29] User: ... Assistant: ..."])
    sent, error = flush(home, config)
    assert sent == 0 and "ConnectError" in error
    assert Breakers(home / "services.sqlite").state("cognee").state == "open"
    server.start()
    assert flush(home, config)[0] == 0  # the breaker holds it back until its cool-down
    with sqlite3.connect(home / "services.sqlite") as db:
        db.execute("UPDATE breakers SET probe_at = 0")
    with sqlite3.connect(home / "outbox.sqlite") as db:
        db.execute("UPDATE outbox SET due = 0")
    assert flush(home, config) == (2, None)
    assert flush(home, config) == (0, None)
    queue(home, "memsift_shop", ["[memsift note N001 · 2026-11-29 · decision] Adyen over Stripe."])
    assert flush(home, config) == (1, None)  # a re-queued document is sent again under its content name
    names = [n for call in server.adds for n in call]
    assert len(set(names)) == 2 and all(n.startswith("memsift-") and n.endswith(".txt") for n in names)
    assert "Adyen over Stripe." in "".join(server.documents.values())


def test_recall_pastes_a_passage_from_the_server(server, project, memsift_home, tmp_path):
    home = memsift_home
    folder = project_dir(project_root(project), home)
    from memsift.backends.cognee import dataset_name

    queue(home, dataset_name(folder.name), ["[memsift passage P7 · 2026-10-02] User: how should the nightly "
                                            "reconciliation job retry failed bank webhooks? Assistant: with "
                                            "exponential backoff, 5 tries, then a dead-letter table."])
    assert flush(home, CogneeConfig(server.url, api_key="k"))[0] == 1
    out, _ = hook(project, server.url, RECALL)
    assert server.searches == 1
    assert "[memsift passage P7 · 2026-10-02] User: how should the nightly" in out["hookSpecificOutput"]["additionalContext"]
    assert "paused" not in json.dumps(out)


def test_local_notes_still_work_while_the_server_is_down(server, project, memsift_home):
    server.stop()
    first, _ = hook(project, server.url, RECALL)
    assert "paused since" in first["hookSpecificOutput"]["additionalContext"]
    out, _ = hook(project, server.url, "payments: why was Adyen chosen over Stripe, was it SEPA direct debit?")
    assert "Adyen chosen over Stripe because Stripe lacked SEPA direct debit" in out["hookSpecificOutput"]["additionalContext"]
    assert Breakers(memsift_home / "services.sqlite").state("cognee").state == "open"


def test_sync_command(server, tmp_path, memsift_home):
    queue(memsift_home, "memsift_x", ["[memsift note N1 · 2026-11-29 · decision] a"])
    env = {"MEMSIFT_COGNEE_URL": server.url, "MEMSIFT_COGNEE_API_KEY": "k"}
    done = run_memsift("sync", env=env)
    assert done.returncode == 0 and b"sent 1, 0 waiting" in done.stdout
    assert run_memsift("sync").returncode == 1
