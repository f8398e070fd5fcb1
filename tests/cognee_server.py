"""A real Cognee server on 127.0.0.1, offline, for memsift's Cognee integration tests.

`CogneeServer` runs ``python -m cognee.api.client`` from a separate venv (cognee 1.6.5,
installed by ``.ci/install-cognee.sh``) against the model stub of ``tests/cognee_stub.py``,
with every piece of state under one fresh directory, and with the settings of
shared/research/cognee.md, Part 2 that keep it from touching the network (telemetry,
litellm's price map, tiktoken and Hugging Face downloads, the GLiNER auto-install).
Access control is on, so datasets are isolated and every call needs auth: the server
logs in as the default user and mints an API key, sent as ``X-Api-Key``.

In a test module::

    from .cognee_server import cognee_server  # noqa: F401  (a session-scoped fixture)

    def test_something(cognee_server):
        httpx.get(cognee_server.url + "/api/v1/datasets", headers=cognee_server.headers)

``stop()`` / ``start()`` restart the server on the same port and state: the API key
lives in its database and the JWT secret is fixed, so both stay valid.

The cognee interpreter is $MEMSIFT_COGNEE_PYTHON, else .ci/.cache/cognee/venv/bin/python;
without one the fixture skips. By hand (prints the URL and the key, Ctrl-C stops)::

    python -m tests.cognee_server [STATE_DIR]
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .cognee_stub import CogneeStub

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PYTHON = REPO / ".ci/.cache/cognee/venv/bin/python"
INSTALL_MARKER = REPO / ".ci/.cache/cognee/venv/.memsift-cognee-version"
PYTHON_VARIABLE = "MEMSIFT_COGNEE_PYTHON"

# Obviously fake test credentials: the server only ever listens on 127.0.0.1.
USER_EMAIL = "memsift@example.com"
USER_PASSWORD = "memsift-test-pw"
JWT_SECRET = "memsift-test-jwt-secret-not-a-real-secret-0123456789"
STUB_KEY = "sk-local-stub"
EMBEDDING_DIMS = 384

BOOT_TIMEOUT = 120.0  # seconds from spawn to GET /health == 200
STOP_TIMEOUT = 20.0  # seconds for SIGTERM before SIGKILL (the server drains for up to 8 s)

# Asks the cognee interpreter for its version and litellm's bundled tiktoken files,
# without importing either package (importing litellm fetches a price map online).
_PROBE = """
import importlib.metadata as m, importlib.util as u, json, os
spec = u.find_spec("litellm")
print(json.dumps({"version": m.version("cognee"),
                  "tiktoken": os.path.join(os.path.dirname(spec.origin), "litellm_core_utils", "tokenizers")}))
"""


class CogneeError(RuntimeError):
    """The Cognee test server could not be started or set up; the message holds its log."""


def find_cognee_python() -> str | None:
    """The interpreter with cognee installed, or None when there is none.

    :raises CogneeError: $MEMSIFT_COGNEE_PYTHON is set but names no executable.
    """
    explicit = os.environ.get(PYTHON_VARIABLE)
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise CogneeError(f"{PYTHON_VARIABLE}={explicit} is not an executable file")
        return explicit
    # The marker is written last by .ci/install-cognee.sh: a half-finished venv does not count.
    installed = os.access(DEFAULT_PYTHON, os.X_OK) and INSTALL_MARKER.is_file()
    return str(DEFAULT_PYTHON) if installed else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CogneeServer:
    """One Cognee server process plus its model stub, all state under ``root``.

    ``url``, ``api_key`` and ``jwt`` are set by the first ``start()``. ``boot_seconds``
    records how long each start took to answer ``/health``.
    """

    def __init__(self, root: Path | str | None = None, *, python: str | None = None,
                 port: int = 0, boot_timeout: float = BOOT_TIMEOUT) -> None:
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="memsift-cognee-") if root is None else root)
        self.python = python or find_cognee_python()
        if self.python is None:
            raise CogneeError(f"cognee is not installed: run .ci/install-cognee.sh or set {PYTHON_VARIABLE}")
        self.port = port or free_port()
        self.boot_timeout = boot_timeout
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.root / "server.log"
        self.api_key: str | None = None
        self.jwt: str | None = None
        self.version: str | None = None
        self.boot_seconds: list[float] = []
        self.stub = CogneeStub(dims=EMBEDDING_DIMS)
        self._env: dict[str, str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- public -------------------------------------------------------------------

    @property
    def headers(self) -> dict[str, str]:
        """Auth for every API call (an API key works only in X-Api-Key, never as Bearer)."""
        if self.api_key is None:
            raise CogneeError("the server has not been started yet")
        return {"X-Api-Key": self.api_key}

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> CogneeServer:
        """Spawn the server (first time: on fresh state) and wait until it is healthy.

        :raises CogneeError: it exited or did not answer ``/health`` within ``boot_timeout``.
        """
        if self.running:
            raise CogneeError(f"the server on {self.url} is already running")
        self.stub.start()
        env = self._environment()
        began = time.monotonic()
        with self.log_path.open("ab") as log:
            log.write(f"\n===== memsift: starting cognee on {self.url} =====\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                [self.python, "-m", "cognee.api.client"], cwd=self.root / "state", env=env,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so stop() reaches its workers
            )
        try:
            self._wait_healthy(began)
            if self.api_key is None:
                self._login_and_mint_key()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL what is left; a no-op when stopped."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        pgid = proc.pid  # start_new_session made it the group leader
        _signal_group(pgid, signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            _signal_group(pgid, signal.SIGKILL)
            proc.wait(timeout=10)
        # DB workers of the group exit with the server; give them a moment, then make sure.
        deadline = time.monotonic() + 5
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        _signal_group(pgid, signal.SIGKILL)

    def close(self) -> None:
        """Stop the server and the stub; remove the state only if this object made it."""
        try:
            self.stop()
        finally:
            self.stub.stop()
            if self._own_root:
                shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no server log)"

    def __enter__(self) -> CogneeServer:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------

    def _environment(self) -> dict[str, str]:
        """The server's whole environment (nothing inherited but PATH): built once, so a
        restart sees the same stub, port, secret and state. Also written to
        ``state/cognee.env``, which COGNEE_ENV_FILE names so that no other ``.env`` is
        searched for (cognee's own search walks up from the package into this repo)."""
        if self._env is not None:
            return self._env
        probe = subprocess.run([self.python, "-c", _PROBE], capture_output=True, text=True, timeout=60)
        if probe.returncode != 0:
            raise CogneeError(f"{self.python} has no usable cognee: {probe.stderr.strip()[-2000:]}")
        facts = json.loads(probe.stdout)
        self.version = facts["version"]
        state = self.root / "state"
        for sub in ("home", "state", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        stub = self.stub.api_base
        settings = {
            # Every file cognee writes stays under root.
            "HOME": str(self.root / "home"),
            "TMPDIR": str(self.root / "tmp"),
            "DATA_ROOT_DIRECTORY": str(state / "data"),
            "SYSTEM_ROOT_DIRECTORY": str(state / "system"),
            "CACHE_ROOT_DIRECTORY": str(state / "cache"),
            "COGNEE_LOGS_DIR": str(state / "logs"),
            "HF_HOME": str(self.root / "home" / "hf"),
            # Offline switches (shared/research/cognee.md, "What reaches the network").
            "TELEMETRY_DISABLED": "1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "TIKTOKEN_CACHE_DIR": facts["tiktoken"],
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "GRAPH_EXTRACTOR": "llm",
            "GLINER_AUTO_INSTALL": "false",
            "SUMMARY_METHOD": "from_extraction",
            # The server.
            "HTTP_API_HOST": "127.0.0.1",
            "HTTP_API_PORT": str(self.port),
            "ENABLE_BACKEND_ACCESS_CONTROL": "true",
            "DEFAULT_USER_EMAIL": USER_EMAIL,
            "DEFAULT_USER_PASSWORD": USER_PASSWORD,
            "FASTAPI_USERS_JWT_SECRET": JWT_SECRET,
            "JWT_LIFETIME_SECONDS": "86400",
            # Models: the stub, tier A (hashed bag-of-words embeddings).
            "LLM_PROVIDER": "openai",
            "LLM_MODEL": "openai/gpt-4o-mini",
            "LLM_ENDPOINT": stub,
            "LLM_API_KEY": STUB_KEY,
            "EMBEDDING_PROVIDER": "openai_compatible",
            "EMBEDDING_MODEL": "text-embedding-3-small",
            "EMBEDDING_ENDPOINT": stub,
            "EMBEDDING_API_KEY": STUB_KEY,
            "EMBEDDING_DIMENSIONS": str(EMBEDDING_DIMS),
        }
        env_file = state / "cognee.env"
        env_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self._env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "COGNEE_ENV_FILE": str(env_file),
            **settings,
        }
        return self._env

    def _wait_healthy(self, began: float) -> None:
        deadline = began + self.boot_timeout
        with httpx.Client(timeout=2.0) as http:
            while True:
                assert self._proc is not None
                if self._proc.poll() is not None:
                    raise CogneeError(f"cognee exited with code {self._proc.returncode} while booting; "
                                      f"log {self.log_path}:\n{self.log_tail()}")
                try:
                    if http.get(self.url + "/health").status_code == 200:
                        self.boot_seconds.append(time.monotonic() - began)
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise CogneeError(f"cognee on {self.url} was not healthy after {self.boot_timeout:.0f} s; "
                                      f"log {self.log_path}:\n{self.log_tail()}")
                time.sleep(0.25)

    def _login_and_mint_key(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30.0) as http:
            login = http.post("/api/v1/auth/login", data={"username": USER_EMAIL, "password": USER_PASSWORD})
            if login.status_code != 200:
                raise CogneeError(f"login as {USER_EMAIL} failed: {login.status_code} {login.text}\n{self.log_tail()}")
            self.jwt = login.json()["access_token"]
            minted = http.post("/api/v1/auth/api-keys", json={"name": "memsift-tests"},
                               headers={"Authorization": f"Bearer {self.jwt}"})
            if minted.status_code != 200:
                raise CogneeError(f"minting an API key failed: {minted.status_code} {minted.text}")
            self.api_key = minted.json()["key"]


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


@pytest.fixture(scope="session")
def cognee_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CogneeServer]:
    """A running Cognee server for the whole session; skipped when cognee is not installed.

    A test that calls ``stop()`` must ``start()`` it again before it ends.
    """
    try:
        python = find_cognee_python()
    except CogneeError as exc:
        pytest.fail(str(exc))
    if python is None:
        pytest.skip(f"cognee not installed: run .ci/install-cognee.sh (about 2 min) or set {PYTHON_VARIABLE}")
    server = CogneeServer(tmp_path_factory.mktemp("cognee"), python=python)
    try:
        server.start()
        yield server
    finally:
        server.close()


def main(argv: list[str]) -> None:
    root = Path(argv[1]) if len(argv) > 1 else None
    with CogneeServer(root) as server:
        print(f"cognee {server.version} on {server.url}\nX-Api-Key: {server.api_key}\n"
              f"log: {server.log_path}   (Ctrl-C stops)", flush=True)
        try:
            while server.running:
                time.sleep(1)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main(sys.argv)
