"""An OpenAI-compatible model stub on 127.0.0.1, so a real Cognee server runs offline.

Cognee needs an embedding engine to start and an LLM to cognify. This stub is both,
in the standard library only (adapted from shared/research/cognee.md, Part 2, tier A):

* ``POST /v1/embeddings``: deterministic feature-hashed bag-of-words vectors (words and
  word pairs), L2-normalised. Texts that share words get close vectors, so CHUNKS search
  ranks the right note first without any model weights. ``encoding_format: base64`` is
  honoured like the real API (little-endian float32).
* ``POST /v1/chat/completions``: a minimal instance of the requested JSON schema
  (``response_format`` json_schema, or a forced tool call), which is all cognify's
  structured-output calls need; plain chats get ``"stub answer: <prompt>"``.
* ``GET`` anything: a one-model list (connection probes).

In a test::

    with CogneeStub() as stub:      # port 0 picks a free port
        ...                         # point Cognee at stub.api_base ("http://127.0.0.1:N/v1")
        stub.calls["/v1/embeddings"]

By hand: ``python tests/cognee_stub.py [PORT [DIMS]]`` (PORT 0 picks a free port).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_DIMS = 384
_WORD = re.compile(r"[a-z0-9_]+")
_MAX_DEPTH = 12


def embed(text: str, dims: int = DEFAULT_DIMS) -> list[float]:
    """A unit vector of ``dims`` floats: signed feature hashing of words and word pairs."""
    vec = [0.0] * dims
    words = _WORD.findall(text.lower())
    for feature in words + [a + " " + b for a, b in zip(words, words[1:])]:
        h = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        vec[int.from_bytes(h[:4], "little") % dims] += 1.0 if h[4] & 1 else -1.0
    if not words:
        vec[0] = 1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def instance(schema: Any, root: dict[str, Any], hint: str, depth: int = 0) -> Any:
    """The smallest value that validates against a JSON schema: required keys only,
    empty arrays, ``hint`` for strings, the first enum member, null where allowed."""
    if depth > _MAX_DEPTH or not isinstance(schema, dict):
        return None
    if "$ref" in schema:
        defs = root.get("$defs") or root.get("definitions") or {}
        return instance(defs.get(schema["$ref"].split("/")[-1], {}), root, hint, depth + 1)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if schema.get("default") is not None:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            if any(isinstance(o, dict) and o.get("type") == "null" for o in schema[key]):
                return None
            return instance(schema[key][0], root, hint, depth + 1)
    if "allOf" in schema:
        out: dict[str, Any] = {}
        for part in schema["allOf"]:
            value = instance(part, root, hint, depth + 1)
            out.update(value if isinstance(value, dict) else {})
        return out
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = "null" if "null" in kind else kind[0]
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = schema.get("required", list(props))
        return {k: instance(props[k], root, hint, depth + 1) for k in props if k in required}
    return {"array": [], "string": hint, "integer": 0, "number": 0.0,
            "boolean": False, "null": None}.get(kind, hint)


def _embeddings(req: dict[str, Any], dims: int) -> dict[str, Any]:
    inputs = req.get("input")
    inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
    dims = int(req.get("dimensions") or dims)
    as_base64 = req.get("encoding_format") == "base64"
    data = []
    for i, text in enumerate(inputs):
        vec = embed(str(text), dims)
        value: Any = base64.b64encode(struct.pack(f"<{dims}f", *vec)).decode() if as_base64 else vec
        data.append({"object": "embedding", "index": i, "embedding": value})
    n = sum(len(str(t).split()) for t in inputs)
    return {"object": "list", "model": req.get("model", "stub"), "data": data,
            "usage": {"prompt_tokens": n, "total_tokens": n}}


def _chat(req: dict[str, Any]) -> dict[str, Any]:
    user = " ".join(m["content"] for m in req.get("messages", [])
                    if m.get("role") == "user" and isinstance(m.get("content"), str))
    hint = " ".join(user.split())[:300] or "stub"
    message: dict[str, Any] = {"role": "assistant", "content": None}
    finish = "stop"
    fmt = req.get("response_format") or {}
    tools = [t.get("function", {}) for t in req.get("tools") or [] if isinstance(t, dict)]
    if fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema") or {}
        message["content"] = json.dumps(instance(schema, schema, hint))
    elif fmt.get("type") == "json_object":
        message["content"] = json.dumps({"nodes": [], "edges": [], "summary": hint, "description": hint})
    elif tools:  # instructor's TOOLS mode: answer with a call to the (first) forced tool
        choice = req.get("tool_choice")
        wanted = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
        tool = next((t for t in tools if t.get("name") == wanted), tools[0])
        params = tool.get("parameters") or {}
        message["tool_calls"] = [{"id": "call_stub", "type": "function", "function": {
            "name": tool.get("name", "tool"), "arguments": json.dumps(instance(params, params, hint))}}]
        finish = "tool_calls"
    else:
        message["content"] = "stub answer: " + hint
    return {"id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()),
            "model": req.get("model", "stub"),
            "choices": [{"index": 0, "finish_reason": finish, "message": message}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            sys.stderr.write("cognee-stub: " + format % args + "\n")

    def _send(self, code: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.count(self.path.split("?")[0])
        self._send(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})

    def do_POST(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        self.server.count(path)
        try:
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except ValueError:
            return self._send(400, {"error": {"message": "body is not JSON"}})
        if path.endswith("/embeddings"):
            return self._send(200, _embeddings(req, self.server.dims))
        if path.endswith("/chat/completions"):
            return self._send(200, _chat(req))
        self._send(404, {"error": {"message": "unknown path " + self.path}})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, dims: int, verbose: bool) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.dims, self.verbose = dims, verbose
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def count(self, path: str) -> None:
        with self._lock:
            self.calls[path] += 1


class CogneeStub:
    """The stub in a background thread; binds 127.0.0.1 at once (port 0: a free one)."""

    def __init__(self, port: int = 0, dims: int = DEFAULT_DIMS, verbose: bool = False) -> None:
        self.dims = dims
        self._server = _Server(port, dims, verbose)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        """What Cognee's LLM_ENDPOINT / EMBEDDING_ENDPOINT should be."""
        return self.url + "/v1"

    @property
    def calls(self) -> Counter[str]:
        """Requests served so far, by path."""
        return self._server.calls

    def start(self) -> CogneeStub:
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever,
                                            kwargs={"poll_interval": 0.05}, daemon=True,
                                            name="cognee-stub")
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> CogneeStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str]) -> None:
    if len(argv) > 3:
        sys.exit(f"usage: {argv[0]} [PORT [DIMS]]")
    port = int(argv[1]) if len(argv) > 1 else 0
    dims = int(argv[2]) if len(argv) > 2 else DEFAULT_DIMS
    stub = CogneeStub(port, dims, verbose=True)
    print(f"cognee stub on {stub.api_base} ({dims} dims)", flush=True)
    try:
        stub._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stub._server.server_close()


if __name__ == "__main__":
    main(sys.argv)
