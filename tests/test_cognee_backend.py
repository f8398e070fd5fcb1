"""memsift's Cognee backend against a real Cognee 1.6.5 server on 127.0.0.1 (`-m cognee`):
push through the outbox, search round trip, dataset isolation between projects, the outbox
replayed after the server comes back, and the prompt hook recalling from the server."""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest

from memsift.backends.cognee import CogneeBackend, dataset_name
from memsift.breaker import Breakers
from memsift.classifiers.encoders import HashingEncoder
from memsift.config import CogneeConfig, project_dir, project_root
from memsift.sync import flush, queue

from .cognee_server import cognee_server  # noqa: F401  (the fixture)
from .conftest import run_memsift

pytestmark = pytest.mark.cognee

WEBHOOKS = ("[memsift passage P7 · 2026-10-02] User: how should the nightly reconciliation job retry failed "
            "bank webhooks? Assistant: exponential backoff, 5 tries, then the dead_letter_webhooks table.")
STAGING = "[memsift note N003 · 2026-09-01 · constraint] The staging database is wiped every Sunday at 02:00 UTC."
OTHER = "[memsift passage Q1 · 2026-08-08] User: which font do we use? Assistant: Inter for the UI, JetBrains Mono for code."


def backend(server, dataset):
    return CogneeBackend(server.url, dataset, HashingEncoder(), api_key=server.api_key)


def data_count(server, dataset) -> int:
    r = httpx.get(f"{server.url}/api/v1/datasets", headers=server.headers)
    ids = [d["id"] for d in r.json() if d["name"] == dataset]
    if not ids:
        return 0
    return len(httpx.get(f"{server.url}/api/v1/datasets/{ids[0]}/data", headers=server.headers).json())


def test_push_search_round_trip_and_isolation(cognee_server, tmp_path):
    home = tmp_path / "home"
    config = CogneeConfig(cognee_server.url, api_key=cognee_server.api_key)
    a, b = dataset_name("shop-1a2b3c4d"), dataset_name("blog-5e6f7a8b")
    queue(home, a, [WEBHOOKS, STAGING])
    queue(home, b, [OTHER])
    assert flush(home, config) == (3, None)
    for ds in (a, b):
        backend(cognee_server, ds).wait_cognified(ds)
    got = backend(cognee_server, a).search("how do we retry failed bank webhooks?", None, 5, 12.0)
    assert got.passages[0].id == "P7" and got.passages[0].date == "2026-10-02"
    assert got.passages[0].text.startswith("User: how should the nightly reconciliation job")
    assert {p.id for p in got.passages} <= {"P7", "N003"}  # never project b's passage
    assert [p.id for p in backend(cognee_server, b).search("fonts", None, 5, 12.0).passages] == ["Q1"]
    assert backend(cognee_server, dataset_name("empty-00000000")).search("x", None, 5, 12.0).passages == []


def test_outbox_replays_after_the_server_comes_back(cognee_server, tmp_path):
    home = tmp_path / "home"
    config = CogneeConfig(cognee_server.url, api_key=cognee_server.api_key)
    ds = dataset_name("replay-11111111")
    cognee_server.stop()
    try:
        queue(home, ds, [WEBHOOKS, STAGING])
        sent, error = flush(home, config)
        assert sent == 0 and error
        assert Breakers(home / "services.sqlite").state("cognee").state == "open"
    finally:
        cognee_server.start()
    with sqlite3.connect(home / "services.sqlite") as db:  # past the cool-down
        db.execute("UPDATE breakers SET probe_at = 0")
    with sqlite3.connect(home / "outbox.sqlite") as db:  # past the backoff
        db.execute("UPDATE outbox SET due = 0")
    assert flush(home, config) == (2, None)
    assert flush(home, config) == (0, None)
    queue(home, ds, [WEBHOOKS])  # the same text again: same content name, no duplicate on the server
    assert flush(home, config) == (1, None)
    backend(cognee_server, ds).wait_cognified(ds)
    assert data_count(cognee_server, ds) == 2
    assert backend(cognee_server, ds).search("bank webhooks retry", None, 5, 12.0).passages[0].id == "P7"


def test_the_prompt_hook_recalls_from_the_server(cognee_server, tmp_path, memsift_home):
    project = tmp_path / "recon"
    (project / ".git").mkdir(parents=True)
    ds = dataset_name(project_dir(project_root(project), memsift_home).name)
    queue(memsift_home, ds, [WEBHOOKS, OTHER])
    assert flush(memsift_home, CogneeConfig(cognee_server.url, api_key=cognee_server.api_key))[0] == 2
    backend(cognee_server, ds).wait_cognified(ds)
    payload = {"session_id": "s1", "transcript_path": "", "cwd": str(project), "hook_event_name": "UserPromptSubmit",
               "prompt": "did we ever decide how the nightly reconciliation job should retry failed bank webhooks?"}
    done = run_memsift("hook", "user-prompt-submit", stdin=json.dumps(payload).encode(),
                       env={"MEMSIFT_COGNEE_URL": cognee_server.url, "MEMSIFT_COGNEE_API_KEY": cognee_server.api_key})
    assert done.returncode == 0
    context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "[memsift passage P7 · 2026-10-02] User: how should the nightly reconciliation job" in context
    assert "Q1" not in context
