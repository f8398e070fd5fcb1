"""Smoke tests of the Cognee test server itself, with plain httpx and no memsift code.

They pin down what memsift's Cognee backend relies on: content-hash uploads, background
cognify plus status polling, CHUNKS search ranking the right note first, dataset
isolation under access control, and data plus API key surviving a restart.
Select them with ``pytest -m cognee``; they skip when cognee is not installed.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from .cognee_server import CogneeServer, cognee_server  # noqa: F401  (the fixture)

pytestmark = pytest.mark.cognee

STAGING = "Staging database is reset every Sunday at 02:00 UTC, so never keep test fixtures there."
REDIS = "To run the integration tests locally, start redis with docker compose up redis before pytest."
ADYEN = "Payment provider: we chose Adyen over Stripe because Adyen supports SEPA direct debit."

COGNIFY_TIMEOUT = 90.0  # seconds; a few notes take 1-5 s


@dataclass
class Seeded:
    """The datasets the module's tests search, and how long seeding took."""
    ids: dict[str, str]  # dataset name -> id
    timings: dict[str, float] = field(default_factory=dict)


def upload_name(text: str) -> str:
    return f"memsift-{hashlib.sha256(text.encode()).hexdigest()[:16]}.txt"


def add(http: httpx.Client, dataset: str, *texts: str) -> dict[str, Any]:
    files = [("data", (upload_name(t), t.encode(), "text/plain")) for t in texts]
    r = http.post("/api/v1/add", files=files, data={"datasetName": dataset})
    assert r.status_code == 200, r.text
    return r.json()


def cognify(http: httpx.Client, dataset: str) -> str:
    """Start a background cognify, wait until the dataset's status says COMPLETED, return its id."""
    r = http.post("/api/v1/cognify", json={"datasets": [dataset], "run_in_background": True})
    assert r.status_code == 200, r.text
    (dataset_id, run), = r.json().items()
    assert run["status"] == "PipelineRunStarted", run
    deadline = time.monotonic() + COGNIFY_TIMEOUT
    while True:
        status = http.get("/api/v1/datasets/status", params={"dataset": dataset_id})
        assert status.status_code == 200, status.text
        state = status.json().get(dataset_id)
        if state == "DATASET_PROCESSING_COMPLETED":
            return dataset_id
        assert state != "DATASET_PROCESSING_ERRORED", status.text
        assert time.monotonic() < deadline, f"cognify of {dataset} still {state} after {COGNIFY_TIMEOUT} s"
        time.sleep(0.2)


def search(http: httpx.Client, query: str, dataset: str, top_k: int = 5) -> list[dict[str, Any]]:
    """CHUNKS hits, best first, each with its ``dataset_name`` (either response shape)."""
    r = http.post("/api/v1/search", json={"query": query, "search_type": "CHUNKS",
                                          "datasets": [dataset], "top_k": top_k})
    assert r.status_code == 200, r.text
    hits = []
    for entry in r.json():
        if isinstance(entry, dict) and "search_result" in entry:  # access control on
            hits += [dict(hit, dataset_name=entry["dataset_name"]) for hit in entry["search_result"]]
        else:  # access control off: a flat list, no dataset
            hits.append(entry)
    return hits


@pytest.fixture(scope="module")
def http(cognee_server: CogneeServer) -> Iterator[httpx.Client]:  # noqa: F811
    with httpx.Client(base_url=cognee_server.url, headers=cognee_server.headers, timeout=30.0) as client:
        yield client


@pytest.fixture(scope="module")
def seeded(http: httpx.Client) -> Seeded:
    timings: dict[str, float] = {}
    t = time.monotonic()
    add(http, "memsift-a", STAGING, REDIS)
    timings["add 2 notes"] = time.monotonic() - t
    t = time.monotonic()
    a = cognify(http, "memsift-a")
    timings["cognify memsift-a (background, until COMPLETED)"] = time.monotonic() - t
    add(http, "memsift-b", ADYEN)
    b = cognify(http, "memsift-b")
    return Seeded({"memsift-a": a, "memsift-b": b}, timings)


def test_uploads_are_named_by_content(http: httpx.Client, seeded: Seeded) -> None:
    r = http.get(f"/api/v1/datasets/{seeded.ids['memsift-a']}/data")
    assert r.status_code == 200, r.text
    names = sorted(item["name"] for item in r.json())
    assert names == sorted(upload_name(t).removesuffix(".txt") for t in (STAGING, REDIS))
    # The same content again is a no-op, not a duplicate and not a 409.
    add(http, "memsift-a", STAGING)
    assert len(http.get(f"/api/v1/datasets/{seeded.ids['memsift-a']}/data").json()) == 2


def test_chunks_search_ranks_the_right_note_first(http: httpx.Client, seeded: Seeded) -> None:
    times = []
    for query, expected in [("when is the staging database reset", STAGING),
                            ("how do I start redis for the integration tests", REDIS)]:
        t = time.monotonic()
        hits = search(http, query, "memsift-a")
        times.append(time.monotonic() - t)
        assert hits, query
        assert hits[0]["text"].strip() == expected, [h["text"] for h in hits]
        assert all(h.get("dataset_name", "memsift-a") == "memsift-a" for h in hits)
    print(f"\ncognee timings: {seeded.timings}; search CHUNKS {[round(s, 3) for s in times]} s")


def test_datasets_are_isolated(http: httpx.Client, seeded: Seeded) -> None:
    query = "which payment provider did we choose, Adyen or Stripe, for SEPA direct debit"
    assert search(http, query, "memsift-b")[0]["text"].strip() == ADYEN
    hits = search(http, query, "memsift-a", top_k=15)
    assert all("Adyen" not in h["text"] for h in hits), [h["text"] for h in hits]
    assert {h.get("dataset_name") for h in hits} <= {"memsift-a"}


def test_data_and_credentials_survive_a_restart(cognee_server: CogneeServer,  # noqa: F811
                                                http: httpx.Client, seeded: Seeded) -> None:
    cognee_server.stop()
    try:
        with pytest.raises(httpx.ConnectError):
            httpx.get(cognee_server.url + "/health", timeout=2.0)
        with pytest.raises(httpx.ConnectError):
            search(http, "when is the staging database reset", "memsift-a")
    finally:
        cognee_server.start()
    # Same port and the same API key (in its DB); the login JWT too (fixed secret).
    assert search(http, "when is the staging database reset", "memsift-a")[0]["text"].strip() == STAGING
    me = httpx.get(cognee_server.url + "/api/v1/auth/me",
                   headers={"Authorization": f"Bearer {cognee_server.jwt}"}, timeout=10.0)
    assert me.status_code == 200, me.text
    print(f"\ncognee boot times: {[round(s, 1) for s in cognee_server.boot_seconds]} s")
