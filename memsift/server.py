"""`memsift serve`: one warm process per memsift home that answers the prompt hook, so a
prompt costs a small client process (`memsift.client`) instead of loading numpy, the model
and the stores each time.

It holds the decision model warm and runs the same code as the hook's own process
(`hook.respond`), so an answer is the one the hook would have given, logged to the same
`hook.log` and `runs.sqlite`; the stores are opened per request, so notes edited by hand or
by another process are read as they are now. It listens on `<home>/serve/memsift.sock`
(folder 0700, socket 0600), and only answers the user it runs as (`SO_PEERCRED` where the
system has it). One server per home: it holds an exclusive lock on `<home>/serve/serve.lock`
while it runs, so a second one started at the same time exits at once.

Lifecycle: the hooks start it (`SessionStart`, and a prompt that found none running); it
exits after `idle` seconds without a request (`MEMSIFT_SERVE_IDLE`, default 30 minutes),
when its install changes (an upgrade, an edit of an editable install, a new model file:
`client.install_id`: a client whose install differs makes it look at its own, and it
looks every minute without requests), on `memsift serve --stop`
and on SIGTERM. `<home>/serve/server.json` says what runs (pid, start, install); `memsift
status` and `doctor` ask the server itself (`op` `status`).

Requests are read and acknowledged by one thread per connection and answered one at a time
by the main thread (the model is not shared across threads), in arrival order.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import socket
import threading
import time
from pathlib import Path

from .client import MAX_HEADER, PROTOCOL, install_id, settings_key, socket_path

log = logging.getLogger("memsift")

#: Seconds without a request after which the server exits.
IDLE_S = 30 * 60
#: Seconds between two checks that the install is unchanged, when no request comes.
CHECK_S = 60.0
#: Bytes a request may have (a hook's stdin: a 2 MB pasted image, escaped).
MAX_REQUEST = 32 << 20
#: Seconds a connection has to send its request.
READ_S = 2.0


def idle_seconds(env=None) -> float:
    """`MEMSIFT_SERVE_IDLE` (seconds), else `IDLE_S`; a value that is not a positive number
    is ignored."""
    raw = (env or os.environ).get("MEMSIFT_SERVE_IDLE", "").strip()
    try:
        return float(raw) if raw and float(raw) > 0 else IDLE_S
    except ValueError:
        return IDLE_S


class Server:
    """The warm server of one memsift home (see the module docstring). `serve()` runs it."""

    def __init__(self, home: Path, idle: float = IDLE_S) -> None:
        self.home = home
        self.folder = home / "serve"
        self.path = Path(socket_path(str(home)))
        self.idle = idle
        self.install = install_id()
        self.env = settings_key()
        self.models: dict = {}  # the warm decision models (`hook.user_prompt_submit`)
        self.jobs: queue.Queue = queue.Queue()
        self.started = time.time()
        self.requests = 0
        self.last = time.monotonic()
        self.stopping = threading.Event()
        self.sock: socket.socket | None = None
        self._lock_fd: int | None = None

    # -- start and stop -------------------------------------------------------------

    def _take_lock(self) -> bool:
        import fcntl

        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        fd = os.open(self.folder / "serve.lock", os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + 3.0  # an old server that is exiting lets go within this
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._lock_fd = fd
                return True
            except OSError:
                if time.monotonic() > deadline or self._live():
                    os.close(fd)
                    return False
                time.sleep(0.1)

    def _live(self) -> bool:
        """Whether a server of this install answers on the socket (then this one is not needed)."""
        from .client import ServerUnavailable, ask

        try:
            ask("status", str(self.home), answer_s=1.0)
            return True
        except ServerUnavailable:
            return False

    def _bind(self) -> None:
        if len(str(self.path).encode()) > 100:
            raise OSError(f"socket path too long for AF_UNIX: {self.path}")
        self.path.unlink(missing_ok=True)  # a stale socket: we hold the lock, so no server owns it
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is created 0600: no window where others may connect
        try:
            sock.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        sock.listen(64)
        sock.settimeout(1.0)
        self.sock = sock

    def _write_state(self) -> None:
        state = {"pid": os.getpid(), "started": self.started, "install": self.install, "socket": str(self.path),
                 "protocol": PROTOCOL}
        tmp = self.folder / f".server.json.{os.getpid()}"
        tmp.write_text(json.dumps(state), encoding="utf-8")
        os.replace(tmp, self.folder / "server.json")

    def _cleanup(self) -> None:
        if self.sock is not None:
            self.sock.close()
            try:
                if self.path.exists():
                    self.path.unlink()
            except OSError:
                pass
        try:
            state = json.loads((self.folder / "server.json").read_text(encoding="utf-8"))
            if state.get("pid") == os.getpid():
                (self.folder / "server.json").unlink()
        except (OSError, ValueError):
            pass
        if self._lock_fd is not None:
            os.close(self._lock_fd)

    def serve(self) -> int:
        """Run until idle, stopped or outdated; 0, or 1 when it could not start. Another
        server of this home running already: 0 at once."""
        from .hook import setup_logging

        try:
            setup_logging(self.home)
        except OSError:
            logging.disable(logging.CRITICAL)
        try:
            if not self._take_lock():
                log.info("memsift serve: another server holds %s; exiting", self.folder / "serve.lock")
                return 0
            self._bind()
        except OSError as exc:
            log.warning("memsift serve: cannot start (%s)", exc)
            return 1
        signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
        try:
            self._warm()
            self._write_state()
            log.info("memsift serve: pid %d listening on %s (install %s)", os.getpid(), self.path, self.install[:12])
            threading.Thread(target=self._accept, daemon=True).start()
            self._work()
        finally:
            self._cleanup()
            log.info("memsift serve: pid %d stopped after %d requests", os.getpid(), self.requests)
        return 0

    def _warm(self) -> None:
        """Load the embedded model and run it once, as the first prompt would."""
        if os.environ.get("MEMSIFT_DECISION_API", "embedded").strip().lower() not in ("", "embedded"):
            return
        try:
            from .classifiers.embedded import EmbeddedChoiceModel

            model = EmbeddedChoiceModel()
            model.embed_query("warm up")
            self.models[os.environ.get("MEMSIFT_ENCODER", "")] = model
        except Exception as exc:  # the first request tries again and logs its own failure
            log.warning("memsift serve: could not warm the model (%s)", exc)

    # -- requests ---------------------------------------------------------------------

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                if self.stopping.is_set():
                    return
                time.sleep(0.05)
                continue
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        """Read one request (`client` has the protocol), acknowledge it, queue it for the
        main thread as `(conn, {"op", "install", "env", "body"})`."""
        try:
            if not self._same_user(conn):
                conn.close()
                return
            conn.settimeout(READ_S)
            reader = conn.makefile("rb")
            header = reader.readline(MAX_HEADER)
            fields = header.rstrip(b"\n").split(b" ")
            if len(fields) != 6 or fields[0] != b"memsift" or not fields[5].isdigit():
                raise ValueError(f"not a memsift request: {header[:80]!r}")
            if fields[1] != str(PROTOCOL).encode():
                self._send(conn, None, f"protocol {fields[1].decode('ascii', 'replace')}, this server speaks {PROTOCOL}")
                conn.close()
                return
            size = int(fields[5])
            if size > MAX_REQUEST:
                raise ValueError(f"a request of {size} bytes")
            body = reader.read(size)
            if len(body) != size:
                raise ValueError(f"closed after {len(body)} of {size} bytes")
            conn.sendall(b"ack\n")
        except (OSError, ValueError) as exc:
            log.info("memsift serve: dropped a request (%s: %s)", type(exc).__name__, str(exc)[:200])
            conn.close()
            return
        op, install, env = (f.decode("ascii", "replace") for f in fields[2:5])
        self.jobs.put((conn, {"op": op, "install": install, "env": env, "body": body}))

    @staticmethod
    def _send(conn: socket.socket, out: bytes | None, error: str = "") -> None:
        """Answer `ok` with `out`, or `err` with `error` (one line) when `out` is None."""
        if out is None:
            conn.sendall(b"err " + " ".join(error.split()).encode("utf-8", "replace")[:1000] + b"\n")
        else:
            conn.sendall(b"ok %d\n" % len(out) + out)

    @staticmethod
    def _same_user(conn: socket.socket) -> bool:
        """Whether the peer runs as our user (Linux `SO_PEERCRED`; elsewhere the socket's
        0600 mode is the check)."""
        import struct

        option = getattr(socket, "SO_PEERCRED", None)
        if option is None:
            return True
        try:
            _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
        except OSError:
            return False
        if uid != os.getuid():
            log.warning("memsift serve: refused a connection from uid %d", uid)
            return False
        return True

    def _work(self) -> None:
        checked = time.monotonic()
        while not self.stopping.is_set():
            try:
                conn, message = self.jobs.get(timeout=1.0)
            except queue.Empty:
                now = time.monotonic()
                if now - self.last > self.idle:
                    log.info("memsift serve: idle for %.0f s; exiting", now - self.last)
                    return
                if now - checked > CHECK_S:
                    checked = now
                    if install_id() != self.install:
                        log.info("memsift serve: the install changed; exiting")
                        return
                continue
            self.last = time.monotonic()
            deferred: list = []  # the run's record, written once the answer is out (`hook.user_prompt_submit`)
            try:
                try:
                    out, error = self._answer(message, deferred)
                except Exception as exc:  # a bug: the hook recalls in its own process, the server goes on
                    log.exception("memsift serve: request failed")
                    out, error = None, f"server error: {type(exc).__name__}"
                self._send(conn, out, error)
            except OSError as exc:
                log.info("memsift serve: could not answer (%s)", exc)
            finally:
                conn.close()
            for work in deferred:
                try:
                    work()
                except Exception:  # a log that cannot be written loses that line, never the server
                    log.exception("memsift serve: recording a run failed")

    def _answer(self, message: dict, deferred: list) -> tuple[bytes | None, str]:
        """`(answer bytes, "")`, or `(None, why refused)`; work to do once it is sent goes in
        `deferred` (callables)."""
        op = message["op"]
        if op == "status":  # whoever asks, whatever install: `memsift status`, `doctor`
            return json.dumps(self.status()).encode(), ""
        if op == "stop":
            self.stopping.set()
            return b'{"stopping": true}', ""
        if message["install"] != self.install:  # the client hashed the install just now
            if install_id() != self.install:
                self.stopping.set()  # outdated: the next prompt starts a server of the new install
                return None, "the server's install is outdated; it exits"
            return None, "another install (version, Python or files)"
        if message["env"] != self.env:
            return None, "started with other MEMSIFT_* settings"
        if op == "hook":
            from .hook import respond

            event, _, stdin = message["body"].partition(b"\n")
            if event != b"user-prompt-submit":
                return None, f"cannot answer hook {event[:40].decode('ascii', 'replace')!r}"
            self.requests += 1
            return respond("user-prompt-submit", stdin, self.home, self.models, deferred), ""
        return None, f"unknown op {op[:40]!r}"

    def status(self) -> dict:
        """pid, uptime (s), requests answered, max RSS (MB), install."""
        import resource

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"pid": os.getpid(), "uptime_s": round(time.time() - self.started, 1), "requests": self.requests,
                "max_rss_mb": round(rss, 1), "install": self.install}


def serve(home: Path, idle: float | None = None) -> int:
    """Run the server of `home` in this process (`memsift serve`)."""
    return Server(home, idle_seconds() if idle is None else idle).serve()


def stop(home: Path, timeout: float = 5.0) -> bool:
    """Ask the server of `home` to stop and wait until it did; whether one was running.
    Raises nothing: a server that does not answer is sent SIGTERM by its recorded pid."""
    from .client import ServerUnavailable, ask

    try:
        ask("stop", str(home), answer_s=2.0)
    except ServerUnavailable:
        pid = _recorded_pid(home)
        if pid is None:
            return False
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and Path(socket_path(str(home))).exists():
        time.sleep(0.05)
    return True


def _recorded_pid(home: Path) -> int | None:
    try:
        pid = json.loads((home / "serve" / "server.json").read_text(encoding="utf-8")).get("pid")
        return pid if isinstance(pid, int) and pid > 0 else None
    except (OSError, ValueError):
        return None


def status(home: Path) -> dict | None:
    """The running server's figures (`Server.status`), or None with none answering."""
    from .client import ServerUnavailable, ask

    try:
        return ask("status", str(home), answer_s=2.0)
    except ServerUnavailable as exc:
        return {"error": str(exc)} if str(exc) != "not running" else None
