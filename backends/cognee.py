"""The Cognee backend: passages on a Cognee 1.6.5 server, over its REST API.

The API as it really is (research note `cognee.md`, Part 1, checked against a live 1.6.5
server): auth with `X-Api-Key` (an API key) or `Authorization: Bearer` (a login JWT);
`POST /api/v1/add` is multipart, and a document is its content within a dataset, so each
is named by its content hash; `POST /api/v1/cognify` runs in the background; `POST
/api/v1/search` with `search_type: CHUNKS` answers a list of `{dataset_id, search_result}`
(access control on) or a flat list of chunks (off), with `score` a cosine *distance*;
an empty or unknown dataset is a 404, which means "no passages", not an outage.

Each project has a dataset of its own (`dataset_name`). Documents start with the frame
memsift pastes (`[memsift passage N012-x · 2026-11-29] ...`), so a hit gives back its id
and date; a chunk without one (a document another tool added) gets a content-hash id.

Searching never retries: it has one budget (connect within `CONNECT_TIMEOUT_S`, the whole
call within the budget) and raises `BackendUnavailable` on any failure. Pushing (from the
outbox, never from a hook) retries transient failures with tenacity.
"""

from __future__ import annotations

import hashlib
import re
import time
from typing import Sequence

import numpy as np

from .base import BackendUnavailable, Passage, SearchResult

#: Seconds to open a connection: a server that is down refuses at once, one that is
#: unreachable must not eat the prompt's budget.
CONNECT_TIMEOUT_S = 0.3
#: Seconds a push watches the cognify it started, to catch one that errors at once.
COGNIFY_WATCH_S = 8.0
#: Characters of the message sent as the query.
MAX_QUERY_CHARS = 2000
_FRAME = re.compile(r"^\[memsift (?:note|passage) (?P<id>[^\s\]·]+)(?: · (?P<date>\d{4}-\d{2}-\d{2}))?(?: · \w+)?\] ?")


def dataset_name(project_folder_name: str) -> str:
    """The project's dataset on the server: `memsift_<folder>` in letters, digits and `_`."""
    return "memsift_" + re.sub(r"\W+", "_", project_folder_name, flags=re.ASCII).strip("_")


def parse_hits(body) -> list[dict]:
    """The chunk payloads of a search response, in either shape, best (lowest distance) first."""
    items: list[dict] = []
    for entry in body if isinstance(body, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("search_result"), list):
            items += [x for x in entry["search_result"] if isinstance(x, dict)]
        elif isinstance(entry, dict) and "text" in entry:
            items.append(entry)
    return sorted(items, key=lambda x: x.get("score") if isinstance(x.get("score"), (int, float)) else 1.0)


def to_passage(text: str) -> Passage:
    """A stored document's text back to a `Passage` (id and date from its frame)."""
    text = text.strip()
    m = _FRAME.match(text)
    if m:
        return Passage(m["id"], m["date"] or "", text[m.end():].strip())
    return Passage("C" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:8], "", text)


class CogneeBackend:
    """`PassageBackend` over one dataset of a Cognee server.

    `encoder` embeds the passages it returns (Cognee's own vectors come from another model,
    and the relevance judge reads e5 cosines). Give `api_key` (sent as `X-Api-Key`) or
    `jwt` (sent as a bearer token).
    """

    name = "cognee"

    def __init__(self, url: str, dataset: str, encoder, *, api_key: str | None = None, jwt: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.dataset = dataset
        self.encoder = encoder
        if api_key:
            self.headers = {"X-Api-Key": api_key}
        elif jwt:
            self.headers = {"Authorization": f"Bearer {jwt}"}
        else:
            self.headers = {}

    def search(self, query: str, query_vector: np.ndarray | None, k: int, budget_s: float) -> SearchResult:
        """The top `k` chunks of the dataset for `query`, as passages with e5 vectors.

        Raises `BackendUnavailable` (refused, timed out past `budget_s`, 401/403, 5xx, a body
        that is not a search response). A 404 (empty or unknown dataset) is no passages.
        """
        import httpx

        start = time.monotonic()
        payload = {"query": query[:MAX_QUERY_CHARS], "search_type": "CHUNKS", "datasets": [self.dataset], "top_k": k}
        try:
            r = httpx.post(f"{self.url}/api/v1/search", json=payload, headers=self.headers,
                           timeout=httpx.Timeout(budget_s, connect=min(CONNECT_TIMEOUT_S, budget_s)))
        except httpx.HTTPError as exc:
            raise BackendUnavailable(f"cognee unreachable ({type(exc).__name__})") from None
        if r.status_code == 404:
            return SearchResult([])
        if r.status_code != 200:
            raise BackendUnavailable(f"cognee answered HTTP {r.status_code}" + (" (check the API key)" if r.status_code in (401, 403) else ""))
        try:
            hits = parse_hits(r.json())
        except ValueError:
            raise BackendUnavailable("cognee answered a body that is not JSON") from None
        passages: list[Passage] = []
        seen: set[str] = set()
        for hit in hits:
            text = hit.get("text")
            if isinstance(text, str) and text.strip():
                p = to_passage(text)
                if p.id not in seen:
                    seen.add(p.id)
                    passages.append(p)
        passages = passages[:k]
        if not passages:
            return SearchResult([])
        if time.monotonic() - start > budget_s:
            raise BackendUnavailable(f"cognee search took more than {budget_s:.1f} s")
        vectors = self.encoder.passage([p.text for p in passages])
        cosines = [float(c) for c in vectors @ query_vector] if query_vector is not None else []
        return SearchResult(passages, cosines, vectors, None, len(passages))

    def close(self) -> None:
        """Nothing to release: each call opens its own connection."""

    def push(self, dataset: str, documents: Sequence) -> None:
        """Add documents (`outbox.Document`: `name`, `text`) to `dataset` and start cognify in
        the background, watching it for up to `COGNIFY_WATCH_S` (an errored run raises). Retries refused connections, timeouts, 429 and 5xx for up to 10 s (the outbox retries later);
        raises `httpx.HTTPError` (or `RuntimeError` for an unexpected answer) when it gives up.
        """
        import httpx
        from tenacity import retry, retry_if_exception, stop_after_delay, wait_exponential_jitter

        def transient(exc: BaseException) -> bool:
            if isinstance(exc, httpx.HTTPStatusError):
                return exc.response.status_code == 429 or exc.response.status_code >= 500
            return isinstance(exc, (httpx.TransportError,))

        @retry(retry=retry_if_exception(transient), stop=stop_after_delay(10),
               wait=wait_exponential_jitter(multiplier=0.5, max=4), reraise=True)
        def post(path: str, **kwargs) -> httpx.Response:
            r = httpx.post(f"{self.url}{path}", headers=self.headers,
                           timeout=httpx.Timeout(60.0, connect=2.0), **kwargs)
            r.raise_for_status()
            return r

        files = [("data", (d.name, d.text.encode("utf-8"), "text/plain; charset=utf-8")) for d in documents]
        post("/api/v1/add", files=files, data={"datasetName": dataset, "node_set": "memsift"})
        runs = post("/api/v1/cognify", json={"datasets": [dataset], "run_in_background": True}).json()
        # a cognify that errors at once (its LLM is down) leaves the documents unsearchable:
        # say so, so that the outbox sends them again later; a slow one is left to finish
        deadline = time.monotonic() + COGNIFY_WATCH_S
        for dataset_id in runs if isinstance(runs, dict) else []:
            while time.monotonic() < deadline:
                r = httpx.get(f"{self.url}/api/v1/datasets/status", params={"dataset": dataset_id},
                              headers=self.headers, timeout=httpx.Timeout(10.0, connect=2.0))
                state = r.json().get(dataset_id) if r.status_code == 200 else None
                if state == "DATASET_PROCESSING_ERRORED":
                    raise RuntimeError(f"cognify of {dataset} errored on the server")
                if state != "DATASET_PROCESSING_STARTED":
                    break
                time.sleep(0.5)

    def wait_cognified(self, dataset: str, timeout_s: float = 300.0) -> None:
        """Block until the dataset's last cognify completed (for tools such as the eval
        harness; memsift never waits). Raises `RuntimeError` when it errored or timed out."""
        import httpx

        deadline = time.monotonic() + timeout_s
        while True:
            r = httpx.get(f"{self.url}/api/v1/datasets", headers=self.headers, timeout=30.0)
            r.raise_for_status()
            ids = [d["id"] for d in r.json() if d.get("name") == dataset]
            if ids:
                r = httpx.get(f"{self.url}/api/v1/datasets/status", params={"dataset": ids[0]},
                              headers=self.headers, timeout=30.0)
                r.raise_for_status()
                state = r.json().get(ids[0])
                if state == "DATASET_PROCESSING_COMPLETED":
                    return
                if state == "DATASET_PROCESSING_ERRORED":
                    raise RuntimeError(f"cognify of {dataset} errored on the server")
            if time.monotonic() > deadline:
                raise RuntimeError(f"cognify of {dataset} not done after {timeout_s:.0f} s")
            time.sleep(0.5)

    def add(self, passages: Sequence[Passage]) -> None:
        """Push passages now (framed as memsift pastes them), through `push`. memsift itself
        pushes through the outbox; this is for tools such as the eval harness."""
        from ..outbox import document
        from ..secrets import mask

        self.push(self.dataset, [document(self.dataset, frame_passage(p, mask(p.text).text)) for p in passages])


def frame_passage(p: Passage, text: str | None = None) -> str:
    """The document stored for a passage: memsift's frame (`transcript.frame_line`), then the text."""
    from ..transcript import frame_line

    return frame_line("passage", p.id, p.date, None, text if text is not None else p.text)
