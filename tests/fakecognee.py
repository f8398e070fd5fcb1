"""A small stand-in for a Cognee server that can misbehave, for fault tests.

It speaks the three calls memsift makes (`POST /api/v1/add` multipart, `POST
/api/v1/cognify`, `POST /api/v1/search` CHUNKS, in the access-control response shape) and
keeps what it was sent. `mode` switches its behaviour at run time: `ok`, `500`, `401`,
`hang` (accepts, never answers), `slow` (answers after `delay` seconds); `stop()` closes
the port (connections refused) and `start()` opens it again on the same port.
The real server is in `tests/cognee_server.py`; this one exists for what a real server
cannot be made to do on demand.
"""

from __future__ import annotations

import json
import threading
import time
from email.parser import BytesParser
from email.policy import default
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeCognee:
    def __init__(self) -> None:
        self.mode = "ok"
        self.delay = 3.0
        self.documents: dict[str, str] = {}  # file name -> text, as a server keeps by content
        self.adds: list[list[str]] = []       # file names of each add call
        self.searches = 0
        self.port = 0
        self.httpd: ThreadingHTTPServer | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if outer.mode == "hang":
                    time.sleep(3600)
                if outer.mode == "slow":
                    time.sleep(outer.delay)
                if outer.mode in ("500", "401"):
                    return self.reply(int(outer.mode), {"detail": "scripted failure"})
                if self.path == "/api/v1/add":
                    message = BytesParser(policy=default).parsebytes(
                        b"Content-Type: " + self.headers["Content-Type"].encode() + b"\r\n\r\n" + body)
                    files = [(part.get_filename(), part.get_payload(decode=True)) for part in message.iter_parts()
                             if part.get_filename()]
                    outer.adds.append([name for name, _ in files])
                    for name, content in files:
                        outer.documents[name] = content if isinstance(content, str) else content.decode("utf-8")
                    return self.reply(200, {"status": "PipelineRunCompleted"})
                if self.path == "/api/v1/cognify":
                    return self.reply(200, {"x": {"status": "PipelineRunStarted"}})
                if self.path == "/api/v1/search":
                    outer.searches += 1
                    query = json.loads(body)["query"].lower()
                    hits = [{"text": t, "score": 0.1 if any(w in t.lower() for w in query.split()) else 0.9}
                            for t in outer.documents.values()]
                    return self.reply(200, [{"dataset_id": "d", "dataset_name": "x", "search_result": hits}])
                return self.reply(404, {"detail": "not found"})

            def reply(self, status, data):
                raw = json.dumps(data).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None
