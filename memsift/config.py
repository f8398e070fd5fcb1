"""Where memsift keeps its state, which project a folder belongs to, and the tunable numbers."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping


def memsift_home() -> Path:
    """`MEMSIFT_HOME`, else `~/.memsift`. Not created here."""
    env = os.environ.get("MEMSIFT_HOME")
    return Path(env).expanduser() if env else Path.home() / ".memsift"


#: Seconds `open_state` tries again a new file that another process is creating.
OPEN_RETRY_S = 2.0


def open_state(path: Path | str, schema: str, *, autocommit: bool = False):
    """A SQLite file of memsift's state (`":memory:"` in tests), as a `sqlite3.Connection`:
    its folder created, the WAL journal (several sessions read and write at once), a 10 s
    busy timeout, and `schema` (idempotent DDL, `CREATE TABLE IF NOT EXISTS ...`) applied.
    With `autocommit`, transactions are the caller's (`BEGIN IMMEDIATE`). Raises
    `sqlite3.Error` and `OSError`.

    Two processes creating the same file at once (twin hooks of one prompt) can meet
    "database is locked" on the switch to WAL, which SQLite's busy handler does not wait
    for: it is tried again for up to `OPEN_RETRY_S` seconds."""
    import sqlite3
    import time

    if str(path) != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), timeout=10.0, **({"isolation_level": None} if autocommit else {}))
    deadline = time.monotonic() + OPEN_RETRY_S
    while True:
        try:
            db.executescript("PRAGMA journal_mode = WAL;\n" + schema)
            return db
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                db.close()
                raise
            time.sleep(0.01)


def read_state(path: Path | str):
    """A SQLite file of memsift's state opened for reading only, for the commands that only
    read (`status`, `log`, `why`): nothing is created, no schema applied, no write tried.

    Opens `mode=ro`, which sees what other sessions are writing through the WAL; where a
    WAL database cannot be opened that way (its `-shm` file missing on a read-only or full
    file system: https://www.sqlite.org/wal.html#readonly), opens it `immutable=1`, a
    snapshot of the main file. Raises `FileNotFoundError` when `path` does not exist, and
    `sqlite3.Error` for a file that cannot be read as a database.
    """
    import sqlite3

    path = Path(path).absolute()
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=10.0)
    try:
        db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # the open is lazy: read once now
    except sqlite3.OperationalError:
        db.close()
        db = sqlite3.connect(f"{path.as_uri()}?immutable=1", uri=True)
        try:
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        except sqlite3.Error:
            db.close()
            raise
    return db


def project_root(cwd: str | os.PathLike[str]) -> Path:
    """The git root above `cwd` (a folder holding `.git`, dir or file), else `cwd` itself.

    Walks the parents instead of running `git`, so it costs microseconds on the hook path.
    """
    start = Path(cwd).expanduser().resolve()
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return start


def name_text(name: str) -> str:
    """A file or folder name as text to write or store: bytes of a name that is not UTF-8
    (which Python keeps as surrogate escapes, PEP 383) become U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def project_dir(root: Path, home: Path | None = None) -> Path:
    """The folder holding one project's notes and index: `<home>/projects/<name>-<hash8>`."""
    # surrogateescape: a folder name that is not UTF-8 hashes as the bytes the file system gave
    digest = hashlib.sha1(str(root).encode("utf-8", "surrogateescape")).hexdigest()[:8]
    name = re.sub(r"[^\w.-]+", "-", root.name or "root").strip("-") or "root"
    return (home or memsift_home()) / "projects" / f"{name}-{digest}"


#: The P(answers) to paste at for a judge whose training chose none (a remote model,
#: calibrated: `training/calibrate_remote.py`): a round prior.
DEFAULT_THRESHOLD = 0.5


@dataclass(frozen=True)
class Settings:
    """The cascade's numbers. Defaults are the shipped operating point.

    Probabilities come from the embedded heads (see `memsift.classifiers.heads`). Thresholds
    are round priors or were set on the training set in `training/`, never on the eval
    conversations (see `training/README.md`).
    """

    #: Genre step budget in seconds (the design's 2 s).
    decision_budget_s: float = 2.0
    #: Passage-backend budget in seconds (the design's 12 s).
    backend_budget_s: float = 12.0
    #: Look things up when the lookup genres' probabilities sum to at least this. Chosen on
    #: the training set's cross-validated genre probabilities as the highest value that still
    #: opens the gate for 95 % of lookup messages (0.3: 96 % opened, 16 % of the others too;
    #: 0.5 opened 92 %): a closed gate loses a recall for good, while an open one still has
    #: every item judged.
    lookup_p: float = 0.3
    #: Below `lookup_p` but at or above this, the notes alone are judged, at
    #: `instruction_note_threshold` at the least: a fully specified instruction ("add a
    #: NOT NULL column to citas", "deploy it now") asks for no lookup, yet may propose what a
    #: stored constraint or an earlier incident forbids. None: the gate simply closes. Off:
    #: on the batch-6 training sessions (never fitted on), with both judges at 0.4, a check at
    #: 0.05 / 0.5 found 4 recalls more and pasted 2 wrong items fewer, but pasted for nothing
    #: 34 times instead of 20 of 463 (`training/README.md`, "memsift-e5-v2").
    instruction_check_p: float | None = None
    #: The least P(answers) a note needs on that path.
    instruction_note_threshold: float = 0.5
    #: Notes judged per message, taken from the top of retrieval.
    note_shortlist: int = 5
    #: P(answers) a note needs to be pasted. None: the judge's own, the threshold its
    #: training chose on held-out projects (`training/train_heads.py`, `choose_threshold`),
    #: else `DEFAULT_THRESHOLD` (`Recaller.threshold`).
    note_threshold: float | None = None
    #: P(none) above which the topic is not worth a passage search.
    topic_none_p: float = 0.7
    #: Passages judged per message and the most pasted.
    passage_shortlist: int = 5
    max_passages: int = 1
    #: P(answers) a passage needs to be pasted (None: as for `note_threshold`).
    passage_threshold: float | None = None
    #: Share of an item's content words already in the conversation that counts as "already said".
    already_said: float = 0.75
    #: Previous turns read from the transcript for the "already said" check.
    context_turns: int = 12
    #: Hard cap on pasted characters per message (the host allows 10,000).
    max_chars: int = 1500
    #: Days in which a captured `context` or `incident` note loses half its weight
    #: (`memsift.fading`; other kinds, and notes written by hand, never fade). Half a year: a
    #: fact a session noticed (a version, where a service runs, a workaround) is typically
    #: still true after a few months, and likely changed after a year or two.
    fade_half_life_days: float = 180.0
    #: Below this weight a note is not pasted (it stays in the file): 0.25 is two half-lives,
    #: a year by default. Above it, weight only orders notes that answer (P(answers) x weight).
    fade_floor: float = 0.25

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """The defaults with what the user set (`environment`): `MEMSIFT_FADE_HALF_LIFE_DAYS`
        and `MEMSIFT_FADE_FLOOR` (`[fade] half_life_days`, `floor` in config.toml). A value
        that is not a number, or out of range (a half-life of 0 or less turns fading off; a
        floor outside 0-1), is ignored with a warning in the log: a setting never stops a hook."""
        import logging

        out: dict[str, float] = {}
        for name, field, ok in (("MEMSIFT_FADE_HALF_LIFE_DAYS", "fade_half_life_days", lambda v: True),
                                ("MEMSIFT_FADE_FLOOR", "fade_floor", lambda v: 0.0 <= v <= 1.0)):
            if env.get(name, "").strip():
                try:
                    value = float(env[name])
                except ValueError:
                    value = float("nan")
                if value == value and ok(value):
                    out[field] = value
                else:
                    logging.getLogger("memsift").warning("%s=%r ignored: not a number in range", name, env[name])
        return cls(**out)


@dataclass(frozen=True)
class CogneeConfig:
    """Where the Cognee memory server is and how to authenticate (an API key or a JWT)."""

    url: str
    api_key: str | None = None
    jwt: str | None = None


def cognee_config(env: Mapping[str, str] | None = None) -> CogneeConfig | None:
    """The Cognee server from `MEMSIFT_COGNEE_URL`, with `MEMSIFT_COGNEE_API_KEY` (else
    `COGNEE_API_KEY`) or `MEMSIFT_COGNEE_TOKEN` (a login JWT); None when no URL is set."""
    env = environment() if env is None else env
    url = env.get("MEMSIFT_COGNEE_URL", "").strip()
    if not url:
        return None
    return CogneeConfig(url, env.get("MEMSIFT_COGNEE_API_KEY") or env.get("COGNEE_API_KEY") or None,
                        env.get("MEMSIFT_COGNEE_TOKEN") or None)


#: `<memsift home>/config.toml` sections and keys, and the variables they stand for.
_TOML_NAMES = {("reviser", "backend"): "MEMSIFT_REVISER"}


def environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """memsift's settings as `MEMSIFT_*` variables: `<memsift home>/config.toml` first, the
    environment over it. A TOML key `[decision] api = "systemone"` stands for
    `MEMSIFT_DECISION_API`, `[cognee] api_key` for `MEMSIFT_COGNEE_API_KEY`, and so on
    (`[reviser] backend` for `MEMSIFT_REVISER`). A file that is not TOML is ignored with a
    warning in the log, so that it never stops a hook.
    """
    env = os.environ if env is None else env
    path = (Path(env["MEMSIFT_HOME"]).expanduser() if env.get("MEMSIFT_HOME") else memsift_home()) / "config.toml"
    out: dict[str, str] = {}
    if path.exists():
        import logging
        import tomllib

        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            logging.getLogger("memsift").warning("%s ignored: %s", path, exc)
            data = {}
        for section, values in data.items():
            if isinstance(values, dict):
                for key, value in values.items():
                    name = _TOML_NAMES.get((section, key), f"MEMSIFT_{section}_{key}".upper())
                    out[name] = str(value)
            else:
                out[f"MEMSIFT_{section}".upper()] = str(values)
    out.update(env)
    return out
