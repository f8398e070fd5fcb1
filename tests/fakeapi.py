"""A minimal fake model API (Anthropic Messages, OpenAI Responses), for offline tests of the
real Claude Code and Codex CLIs.

It answers ``POST /v1/messages`` (streamed or not) and ``POST /v1/responses`` (streamed)
with a canned reply, and appends
every request it sees to a JSON Lines log, one object per request:
``{"method": ..., "path": ..., "body": ...}``.  Tests point Claude Code at it with
``ANTHROPIC_BASE_URL=http://127.0.0.1:<port>`` and then read the log to see exactly
what the host sent to the model.

In a test::

    with FakeAnthropicAPI(tmp_path / "requests.jsonl") as api:
        ...  # run claude with ANTHROPIC_BASE_URL=api.url
        bodies = api.message_bodies()

By hand: ``python tests/fakeapi.py PORT LOGFILE`` (PORT 0 picks a free port).
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPLY = "PONG-FROM-FAKE-API"


def _message(model: str) -> dict[str, Any]:
    """A complete, non-streamed Messages API response."""
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": REPLY}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 3},
    }


def _stream_events(model: str) -> list[tuple[str, dict[str, Any]]]:
    """The same response as a sequence of server-sent events."""
    start = dict(_message(model), content=[], stop_reason=None,
                 usage={"input_tokens": 10, "output_tokens": 1})
    return [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": REPLY}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 3}}),
        ("message_stop", {"type": "message_stop"}),
    ]


def _tool_use_events(model: str, name: str, arguments: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A streamed Messages API response that calls tool `name` with `arguments`."""
    start = dict(_message(model), content=[], stop_reason=None, usage={"input_tokens": 10, "output_tokens": 1})
    return [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "tool_use", "id": "toolu_fake1", "name": name, "input": {}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "input_json_delta", "partial_json": json.dumps(arguments)}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                           "usage": {"output_tokens": 5}}),
        ("message_stop", {"type": "message_stop"}),
    ]


def _has_tool_result(history: Any) -> bool:
    """Whether a request's history holds a tool's result: a Messages API `tool_result` block
    in a message's content, or a Responses API `function_call_output` item."""
    for m in history or []:
        if not isinstance(m, dict):
            continue
        blocks = m.get("content") if isinstance(m.get("content"), list) else []
        if m.get("type") == "function_call_output" or any(isinstance(b, dict) and b.get("type") == "tool_result"
                                                          for b in blocks):
            return True
    return False


def _response(model: str, item: dict[str, Any]) -> dict[str, Any]:
    """A completed Responses API response whose one output is `item`."""
    return {"id": "resp_fake", "object": "response", "created_at": 0, "status": "completed", "model": model,
            "output": [item], "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                                        "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0},
                                        "total_tokens": 13}}


def _responses_call_events(model: str, name: str, arguments: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A Responses API stream whose one output item calls function `name` with `arguments`;
    `name` is "namespace/child" for a tool inside a namespace (how Codex offers MCP tools)."""
    namespace, _, child = name.rpartition("/")
    item = {"type": "function_call", "id": "fc_fake1", "call_id": "call_fake1", "name": child,
            "arguments": json.dumps(arguments), "status": "completed", **({"namespace": namespace} if namespace else {})}
    resp = _response(model, item)
    return [
        ("response.created", {"type": "response.created", "response": dict(resp, status="in_progress", output=[])}),
        ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                        "item": dict(item, status="in_progress", arguments="")}),
        ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed", "response": resp}),
    ]


def _tool_named(tools: Any, suffix: str) -> str | None:
    """The name of the first tool in a request's `tools` whose name ends with `suffix`
    ("namespace/child" for a tool of a Responses API namespace)."""
    for t in tools or []:
        if not isinstance(t, dict):
            continue
        if t.get("type") == "namespace":
            inner = _tool_named(t.get("tools"), suffix)
            if inner:
                return f"{t.get('name')}/{inner}"
            continue
        name = t.get("name") or (t.get("function") or {}).get("name")
        if isinstance(name, str) and name.endswith(suffix):
            return name
    return None


def _responses_events(model: str) -> list[tuple[str, dict[str, Any]]]:
    """One assistant message as the OpenAI Responses API streams it (the research note
    hostcli.md, appendix A: enough for `codex exec`)."""
    item = {"type": "message", "id": "msg_fake", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": REPLY, "annotations": []}]}
    resp = _response(model, item)
    return [
        ("response.created", {"type": "response.created", "response": dict(resp, status="in_progress", output=[])}),
        ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                        "item": dict(item, status="in_progress", content=[])}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "msg_fake",
                                        "output_index": 0, "content_index": 0, "delta": REPLY}),
        ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed", "response": resp}),
    ]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    # -- plumbing ---------------------------------------------------------------

    def _read_body(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {"_raw": raw.decode("utf-8", "replace")}

    def _send(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_json(self, status: int, obj: Any) -> None:
        self._send(status, "application/json", json.dumps(obj).encode())

    def _not_found(self) -> None:
        self._send_json(404, {"type": "error",
                              "error": {"type": "not_found_error", "message": "fake API"}})

    # -- routes -----------------------------------------------------------------

    def do_HEAD(self) -> None:  # connectivity probes
        self.server.record({"method": "HEAD", "path": self.path})
        self._send(200, "text/plain", b"")

    def do_GET(self) -> None:
        self.server.record({"method": "GET", "path": self.path})
        if self.path.split("?")[0].endswith("/v1/models"):
            self._send_json(200, {"data": [], "has_more": False})
        else:
            self._not_found()

    def do_POST(self) -> None:
        body = self._read_body()
        self.server.record({"method": "POST", "path": self.path, "body": body})
        path = self.path.split("?")[0]
        if path.endswith("/v1/messages/count_tokens"):
            self._send_json(200, {"input_tokens": 10})
        elif path.endswith("/v1/messages"):
            model = body.get("model", "fake") if isinstance(body, dict) else "fake"
            if name := self._scripted_call(body, "messages"):
                self._send_sse(_tool_use_events(model, name, self.server.tool_call[1]))
            elif isinstance(body, dict) and body.get("stream"):
                self._send_sse(_stream_events(model))
            else:
                self._send_json(200, _message(model))
        elif path.endswith("/responses"):  # OpenAI Responses API, as Codex streams it
            model = body.get("model", "fake") if isinstance(body, dict) else "fake"
            if name := self._scripted_call(body, "input"):
                self._send_sse(_responses_call_events(model, name, self.server.tool_call[1]))
            else:
                self._send_sse(_responses_events(model))
        else:
            self._not_found()

    def _scripted_call(self, body: Any, history: str) -> str | None:
        """The tool to call in answer to `body`, when a tool call is scripted, `body` offers
        that tool and its `history` ("messages" or "input") holds no tool result yet."""
        call = self.server.tool_call
        if not call or not isinstance(body, dict):
            return None
        name = _tool_named(body.get("tools"), call[0])
        return name if name and not _has_tool_result(body.get(history)) else None

    def _send_sse(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        data = "".join(f"event: {name}\ndata: {json.dumps(payload)}\n\n"
                       for name, payload in events).encode()
        self._send(200, "text/event-stream", data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, log_path: Path, tool_call: tuple[str, dict[str, Any]] | None = None) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.log_path = log_path
        self.tool_call = tool_call
        self._lock = threading.Lock()

    def record(self, entry: dict[str, Any]) -> None:
        with self._lock, self.log_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, ensure_ascii=False) + "\n")


class FakeAnthropicAPI:
    """Runs the fake server in a background thread on a free loopback port.

    `tool_call` = (name suffix, arguments) scripts one tool call: a model request that offers
    a tool whose name ends with the suffix, and holds no tool result yet, is answered by a
    call of that tool with those arguments; the request after it (with the result) gets the
    canned text.
    """

    def __init__(self, log_path: Path | str, port: int = 0, tool_call: tuple[str, dict[str, Any]] | None = None) -> None:
        self.log_path = Path(log_path)
        self.log_path.touch()
        self._server = _Server(port, self.log_path, tool_call)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "FakeAnthropicAPI":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def requests(self) -> list[dict[str, Any]]:
        """Every logged request, oldest first."""
        with self.log_path.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def message_bodies(self) -> list[Any]:
        """The JSON bodies of the ``POST /v1/messages`` calls (the model requests)."""
        return [r["body"] for r in self.requests()
                if r["method"] == "POST" and r["path"].split("?")[0].endswith("/v1/messages")]


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        sys.exit(f"usage: {argv[0]} PORT LOGFILE")
    api = FakeAnthropicAPI(argv[2], int(argv[1]))
    print(f"fake Anthropic API on {api.url}, logging to {argv[2]}", flush=True)
    try:
        api._server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main(sys.argv)
