"""Check the concrete claims notes make against the project as it is now.

A note that confidently says something no longer true is worse than none. Out of the
prompt path (the session-start sweep's detached process, `capture.sweep`, and `memsift
notes verify`), each active note's claims are checked:

- a path (`src/pay/adyen.py`, a backticked `docs/` or `config.toml`) exists in the project;
- a git branch ("branch `feature/x`", "the `release-2` branch") is a local or
  remote-tracking branch (one `git for-each-ref`, with a timeout);
- a script (`npm run X`, `yarn X`, `pnpm X`, `make X`, `uv run X`) is in `package.json`, the
  `Makefile` or `pyproject.toml`'s `[project.scripts]`;
- an environment variable (`ALL_CAPS_NAME` in backticks, or `$ALL_CAPS_NAME`) is named in
  one of the project's text files (a bounded scan).

Extraction is conservative: a sentence that says something was removed, renamed, moved,
replaced or will be made, or that negates, names no claim, and well-known names (a system
variable, `Node.js`, a build output folder) are not claims. Better to check fewer claims than
to flag a true note. Nothing the note names is ever run, nothing goes to the network, and
the whole check stops after `VERIFY_SECONDS`: notes not reached keep their status.

A note whose claim fails gets `unverified (<what failed>, <YYYY-MM-DD>)` at the end of its
header (`notefile`); a later check where every claim holds clears it. Each such change of
the file is one revision (backend "verifier", `revision.commit`) that `memsift notes
history` lists and `memsift notes undo` reverts; only the header lines of the notes whose
status changes are rewritten.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import stat
import subprocess
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from .notefile import text_hash

if TYPE_CHECKING:
    from .notes import NoteStore

log = logging.getLogger("memsift")

#: The whole verification's budget, in seconds: notes not checked by then keep their status.
VERIFY_SECONDS = 10.0
#: `git` gets this many seconds (it reads refs: milliseconds, unless the disk hangs).
GIT_TIMEOUT_S = 3.0
#: The project scan (paths named without their folder, environment variables): files listed
#: at most, bytes read at most per file and in all.
SCAN_MAX_FILES = 50_000
SCAN_FILE_BYTES = 1 << 20
SCAN_TOTAL_BYTES = 64 << 20
#: Folders never scanned: version control, dependencies, virtual environments, caches.
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".tox", ".nox",
                       ".mypy_cache", ".pytest_cache", ".ruff_cache", ".cache", ".idea", ".gradle"})
#: Folders a build writes (absent from a fresh clone): a path under one is no claim.
BUILD_DIRS = frozenset({"dist", "build", "out", "target", "coverage", ".next", "node_modules", ".venv", "venv",
                        "__pycache__", "site", "htmlcov"})
#: Endings that make a backticked word a file name.
EXTENSIONS = frozenset(
    "py pyi js mjs cjs ts tsx jsx json toml yaml yml md rst txt cfg ini sh bash zsh ps1 bat rs go java kt rb php "
    "c h cc cpp hpp cs swift sql html css scss vue svelte lock xml gradle tf proto graphql env example conf".split())
#: Words of a sentence that make its names something other than a claim that they exist now:
#: gone or changed ("removed", "renamed from"), negated, or yet to be ("will", "create").
_NOT_NOW = re.compile(
    r"(?i)\b(?:remov|delet|renam|replac|deprecat|migrat|introduc|propos|archiv|creat)\w*|n't\b|"
    r"\b(?:drop(?:s|ped|ping)?|mov(?:e|es|ed|ing)|switch(?:es|ed|ing)?|merg(?:e|es|ed|ing)|retir(?:e|es|ed|ing)|"
    r"gone|no longer|not|never|without|instead|rather than|used to|formerly|previously|legacy|old|was|were|"
    r"will|plan(?:s|ned)?|todo|later|should|could|would|might|maybe|if|add(?:s|ed|ing)?|revert(?:s|ed)?|"
    r"next|can go|need(?:s|ed)? to|must|ask|write|put)\b|"
    # the same in French, German and Spanish: gone or changed, negated, yet to be
    r"(?:supprim|renomm|déplac|remplac|gelöscht|entfernt|umbenannt|verschoben|ersetzt|eliminad|borrad|renombrad"
    r"|reemplazad)\w*|\b(?:n['’]|ne|plus|jamais|était|sera|seront|doit|devrait|ancien(?:ne)?|nicht|kein(?:e|en)?|nie"
    r"|war|wird|werden|soll(?:te)?|später|alte[nrs]?|no|nunca|ya no|será|antes|antiguo)\b|\?\s*$|"
    # a path of another repository: "in the billing-api repo, ..."
    r"\b(?:in|from|of)\s+(?:the\s+)?[\w.-]+\s+(?:repo|repository)\b")
#: Environment variables every machine has, or that belong to a host, a CI or memsift:
#: a note naming one says nothing about the project's files.
_COMMON_ENV = re.compile(
    r"^(?:XDG_|GITHUB_|GIT_|CI_|RUNNER_|AWS_|CLAUDE_|CODEX_|MEMSIFT_|CONDA_|NPM_|PIP_|PYTHON|LC_|SSH_|DOCKER_|TERM_"
    r"|COMPOSE_|HOMEBREW_|KUBE|CARGO_|RUST|JAVA_|ANDROID_|NVM_|PNPM_|YARN_|BUN_|DENO_|GO(?:PATH|ROOT|BIN|FLAGS)$)|"
    r"^(?:LD_LIBRARY_PATH|LD_PRELOAD|NODE_OPTIONS|NODE_ENV|HTTP_PROXY|HTTPS_PROXY|NO_PROXY|ALL_PROXY|"
    r"VIRTUAL_ENV|JAVA_HOME|GOOGLE_APPLICATION_CREDENTIALS|OPENAI_API_KEY|ANTHROPIC_API_KEY|DYLD_LIBRARY_PATH)$")
#: Names that look like files but are software (`Node.js`).
_PRODUCTS = re.compile(r"(?i)^(?:node|next|nuxt|vue|react|express|three|d3|chart|ember|backbone|angular|moment|"
                       r"p5|pixi|alpine|socket|deno|bun|solid|preact)\.js$")
#: Package managers' own commands (`yarn add`), which are not scripts of the project.
_PM_BUILTINS = frozenset(
    "add install i remove rm uninstall update upgrade up init create dlx exec x why info list ls link unlink "
    "global config cache publish pack audit outdated login logout version run workspace workspaces import "
    "rebuild prune patch set store env help bin".split())
#: Tools `uv run` runs that are no script of the project.
_COMMON_TOOLS = frozenset(
    "python python3 pytest ruff mypy black isort flake8 pip coverage tox nox pre-commit ipython jupyter uvicorn "
    "gunicorn alembic django-admin flask sphinx-build mkdocs pyright pylint bandit hatch twine".split())

_CODE = re.compile(r"`([^`\n]{1,200})`")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
_PATH_BARE = re.compile(r"(?<![\w/.@:~$-])((?:[\w.-]+/)+[\w.-]+\.(?:" + "|".join(sorted(EXTENSIONS)) + r"))\b")
_BRANCH = re.compile(r"(?i)\bbranch(?:es)?\s+`([\w./-]{1,100})`|`([\w./-]{1,100})`\s+branch\b")
_SCRIPT = re.compile(r"(?<![\w-])(npm run|yarn run|yarn|pnpm run|pnpm|make|uv run)\s+([A-Za-z0-9][\w:./-]{0,80})")
#: A word shaped like an environment variable, in a file's bytes (`Project.names_env`).
_ENV_WORD = re.compile(rb"(?<![A-Za-z0-9_])[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+(?![A-Za-z0-9_])")
_ENV = re.compile(r"`\$?\{?([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\}?(?:=[^`]*)?`|(?<![\w$])\$\{?([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b")


@dataclass(frozen=True)
class Claim:
    """One checkable claim of a note: `kind` is "path", "branch", "script" or "env";
    `value` the path (relative, '/'-separated), branch, variable, or `"<tool> <name>"` for a
    script."""

    kind: str
    value: str

    def __str__(self) -> str:
        return f"{'variable' if self.kind == 'env' else self.kind} {self.value}"


def claims(text: str) -> list[Claim]:
    """The claims a note's `text` makes, in order, each once (see the module docstring for
    what counts). Pure: reads nothing but `text`."""
    out: dict[Claim, None] = {}
    fenced, inside = set(), False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside:
            fenced.add(line.strip())
    for sentence in _SENTENCE.split(text):
        sentence = sentence.strip()
        if not sentence.strip() or _NOT_NOW.search(_CODE.sub(" ", sentence)):
            continue
        branches = set()
        for m in _BRANCH.finditer(sentence):
            name = m[1] or m[2]
            if ".." not in name and not name.startswith(("-", "/")) and not name.endswith((".", "/")):
                out[Claim("branch", name)] = None
            branches.add(name)
        # a command only in code (`make test`): in prose, "make sure" is no target
        code = [m[1] for m in _CODE.finditer(sentence)] + ([sentence] if sentence in fenced else [])
        for m in (m for span in code for m in _SCRIPT.finditer(span)):
            tool, name = m[1], m[2].rstrip(".:")
            if tool in ("yarn", "pnpm") and name in _PM_BUILTINS:
                continue
            if tool == "uv run" and "." in name and name.rsplit(".", 1)[1] in EXTENSIONS:
                continue  # `uv run manage.py`: a file run, no script
            if tool != "make" and "/" in name:
                continue
            out[Claim("script", f"{tool} {name}")] = None
        if sentence in fenced:
            continue  # code: what it creates or names is no claim that it exists (`mkdir -p src/new`)
        for m in _ENV.finditer(sentence):
            name = m[1] or m[2]
            if not _COMMON_ENV.match(name):
                out[Claim("env", name)] = None
        for m in _CODE.finditer(sentence):
            if m[1] in branches:
                continue
            if (path := _as_path(m[1], backticked=True)) is not None:
                out[Claim("path", path)] = None
        for m in _PATH_BARE.finditer(_CODE.sub(" ", sentence)):
            if (path := _as_path(m[1], backticked=False)) is not None:
                out[Claim("path", path)] = None
    return list(out)


def _as_path(token: str, *, backticked: bool) -> str | None:
    """`token` as a project-relative path claim, or None when it is not unambiguously one."""
    token = token.strip()
    if not token or re.search(r"\s|://|[*?{}<>$%|\"'\\]", token) or token.startswith(("-", "@", "~", "/", "#")):
        return None
    token = re.sub(r"(?:::\S*|#L?\d+\S*|:\d+(?::\d+)?)$", "", token)  # a test id, an anchor, a line number
    token = token.removeprefix("./")
    parts = token.rstrip("/").split("/")
    if not token or any(p in ("", ".", "..") for p in parts) or parts[0] in BUILD_DIRS:
        return None
    if len(parts) > 1 and re.fullmatch(r"[\w-]+(?:\.[\w-]+)*\.[A-Za-z]{2,6}", parts[0]) \
            and parts[0].rsplit(".", 1)[1].lower() not in EXTENSIONS:
        return None  # `github.com/acme/x.md`: a URL without its scheme
    last = parts[-1]
    ext = last.rsplit(".", 1)[1].lower() if "." in last.strip(".") else ""
    if len(parts) == 1:  # a bare name: a file name only with a known ending
        if not backticked or ext not in EXTENSIONS or _PRODUCTS.match(last) or re.fullmatch(r"[\d.]+\w*", last):
            return None
        return token
    if ext in EXTENSIONS or token.endswith("/") and backticked:
        return token.rstrip("/") + ("/" if token.endswith("/") else "")
    return None  # `feature/x`, `origin/main`, `owner/repo`: no ending, so perhaps no path


class Project:
    """What the checks read of a project folder `root`, each fact gathered once, lazily,
    within the deadline `deadline` (a `time.monotonic()` value).

    Each `has_*` returns True (the claim holds), False (it fails) or None (cannot tell: no
    git repository, the scan cut short by its limits or the deadline).
    """

    def __init__(self, root: Path, deadline: float) -> None:
        self.root = Path(root)
        self.deadline = deadline
        self._branches: set[str] | None | bool = False  # False: not read yet; None: cannot tell
        self._files: tuple[set[str], set[str], bool] | None = None
        self._env: dict[str, bool] = {}
        self._env_complete = False
        self._scripts: dict[str, set[str] | None] = {}
        self._tails: dict[int, set[str]] = {}

    # -- paths --------------------------------------------------------------------------

    def has_path(self, path: str) -> bool | None:
        """Whether `path` (relative, '/'-separated; a trailing '/' for a folder) exists at the
        root, or, when it is not there, as the end of a path in the project (`pay/adyen.py`
        for `src/pay/adyen.py`)."""
        folder = path.endswith("/")
        rel = path.rstrip("/")
        target = self.root / rel
        if (target.is_dir() if folder else target.exists()):
            return True
        files, dirs, complete = self._listing()
        if rel in self._suffixes(dirs) or not folder and rel in self._suffixes(files):
            return True
        return False if complete else None

    def _suffixes(self, paths: set[str]) -> set[str]:
        """Every tail of each path in `paths` (`a/b/c.py`: `a/b/c.py`, `b/c.py`, `c.py`), once per set."""
        key = id(paths)
        if key not in self._tails:
            tails = set()
            for p in paths:
                parts = p.split("/")
                tails.update("/".join(parts[i:]) for i in range(len(parts)))
            self._tails[key] = tails
        return self._tails[key]

    def _listing(self) -> tuple[set[str], set[str], bool]:
        """The project's files and folders (relative, '/'-separated) and whether the list is
        complete (not cut by `SCAN_MAX_FILES` or the deadline)."""
        if self._files is None:
            files: set[str] = set()
            dirs: set[str] = set()
            complete = True
            for top, subdirs, names in os.walk(self.root):
                subdirs[:] = [d for d in subdirs if d not in SKIP_DIRS]
                rel = os.path.relpath(top, self.root).replace(os.sep, "/")
                prefix = "" if rel == "." else rel + "/"
                dirs.update(prefix + d for d in subdirs)
                files.update(prefix + n for n in names)
                if len(files) > SCAN_MAX_FILES or time.monotonic() > self.deadline:
                    complete = False
                    break
            self._files = (files, dirs, complete)
        return self._files

    # -- branches -----------------------------------------------------------------------

    def has_branch(self, name: str) -> bool | None:
        """Whether `name` is a local branch or a remote-tracking one (`origin/<name>` too)."""
        if self._branches is False:
            self._branches = self._read_branches()
        if self._branches is None:
            return None
        return name in self._branches

    def _read_branches(self) -> set[str] | None:
        if not (self.root / ".git").exists():
            return None
        try:
            out = subprocess.run(
                ["git", "-C", str(self.root), "for-each-ref", "--format=%(refname)", "refs/heads", "refs/remotes"],
                capture_output=True, text=True, timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL,
                env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"},
            )
        except (OSError, subprocess.SubprocessError) as exc:
            log.info("verify: cannot read the branches of %s (%s)", self.root, exc)
            return None
        if out.returncode != 0:
            log.info("verify: git for-each-ref in %s failed: %s", self.root, out.stderr.strip()[:200])
            return None
        names = set()
        for ref in out.stdout.split():
            if ref.startswith("refs/heads/"):
                names.add(ref[len("refs/heads/"):])
            elif ref.startswith("refs/remotes/"):
                remote_ref = ref[len("refs/remotes/"):]
                names.add(remote_ref)  # origin/main
                names.add(remote_ref.partition("/")[2])  # main
        return names

    # -- scripts ------------------------------------------------------------------------

    def has_script(self, claim: str) -> bool | None:
        """Whether the script `claim` ("npm run build", "make test", "uv run serve") is
        defined in the project's `package.json`s (the root's and up to two folders down),
        its `Makefile`, or `pyproject.toml` (`[project.scripts]`)."""
        tool, _, name = claim.rpartition(" ")
        if tool in ("npm run", "yarn", "yarn run", "pnpm", "pnpm run"):
            scripts = self._scripts_of("package.json", self._package_scripts)
        elif tool == "make":
            scripts = self._scripts_of("make", self._make_targets)
        else:  # uv run
            scripts = self._scripts_of("pyproject", self._pyproject_scripts)
            if name in _COMMON_TOOLS or any((self.root / v / "bin" / name).exists() for v in (".venv", "venv")):
                return True
        if scripts is None:
            return None
        return name in scripts

    def _scripts_of(self, key: str, read) -> set[str] | None:
        if key not in self._scripts:
            try:
                self._scripts[key] = read()
            except (OSError, ValueError) as exc:
                log.info("verify: cannot read the %s scripts of %s (%s)", key, self.root, exc)
                self._scripts[key] = None
        return self._scripts[key]

    def _package_scripts(self) -> set[str]:
        names: set[str] = set()
        for pattern in ("package.json", "*/package.json", "*/*/package.json"):
            for path in self.root.glob(pattern):
                if any(part in SKIP_DIRS for part in path.relative_to(self.root).parts) or not path.is_file():
                    continue  # a named pipe called package.json would block the read
                if path.stat().st_size > SCAN_FILE_BYTES:
                    continue
                try:
                    data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
                except ValueError:
                    raise ValueError(f"{path} is not JSON") from None
                scripts = data.get("scripts") if isinstance(data, dict) else None
                if isinstance(scripts, dict):
                    names.update(str(k) for k in scripts)
        return names

    def _make_targets(self) -> set[str] | None:
        path = next((self.root / n for n in ("GNUmakefile", "makefile", "Makefile") if (self.root / n).is_file()), None)
        if path is None:
            return set()
        text = path.read_text(encoding="utf-8", errors="replace")[:SCAN_FILE_BYTES]
        if re.search(r"^-?include\b|^[^#\n]*%[^\n]*:", text, re.MULTILINE):
            return None  # targets from elsewhere or from patterns: a missing one proves nothing
        targets: set[str] = set()
        for m in re.finditer(r"^([^\s:#=][^:#=]*?)\s*::?(?!=)", text, re.MULTILINE):
            if "$" in m[1]:
                return None  # a target named by a variable
            targets.update(m[1].split())
        return targets

    def _pyproject_scripts(self) -> set[str] | None:
        path = self.root / "pyproject.toml"
        if not path.is_file():
            return set()
        text = path.read_text(encoding="utf-8", errors="replace")
        data = tomllib.loads(text)
        project = data.get("project", {})
        names = {str(k) for table in ("scripts", "gui-scripts") for k in project.get(table, {}) or {}}
        # a dependency's own command (`uv run uvicorn`) is named there too
        names.update(re.findall(r"[A-Za-z0-9][\w.-]*", text))
        return names

    # -- environment variables -----------------------------------------------------------

    def names_env(self, names: Iterable[str]) -> None:
        """Scan the project's text files once for every variable in `names` (whole words),
        within the scan limits; `has_env` then answers."""
        wanted = sorted(set(names) - set(self._env))
        if not wanted:
            return
        want = {n.encode() for n in wanted}
        found: set[bytes] = set()
        files, _, complete = self._listing()
        total = 0
        for rel in sorted(files):
            if time.monotonic() > self.deadline or total > SCAN_TOTAL_BYTES:
                complete = False
                break
            try:
                path = os.path.join(self.root, rel)
                if not stat.S_ISREG(os.stat(path).st_mode):
                    continue  # a named pipe or a device would block the read, or never end
                with open(path, "rb") as fh:
                    data = fh.read(SCAN_FILE_BYTES)
            except OSError:
                continue
            total += len(data)
            if b"\0" in data[:8192]:
                continue  # binary
            found.update(want.intersection(_ENV_WORD.findall(data)))
            if len(found) == len(want):
                complete = True
                break
        for n in wanted:
            if n.encode() in found:
                self._env[n] = True
            elif complete:
                self._env[n] = False

    def has_env(self, name: str) -> bool | None:
        """Whether the variable `name` is named in a text file of the project (`names_env`
        first; None when the scan could not tell)."""
        if name not in self._env:
            self.names_env([name])
        return self._env.get(name)

    def check(self, claim: Claim) -> bool | None:
        """Whether `claim` holds (see the `has_*` methods); None (cannot tell) when the file
        system refuses to say (a name too long, a folder that cannot be read)."""
        try:
            return self._check(claim)
        except OSError as exc:
            log.info("verify: cannot check %s in %s (%s)", claim, self.root, exc)
            return None

    def _check(self, claim: Claim) -> bool | None:
        if claim.kind == "path":
            return self.has_path(claim.value)
        if claim.kind == "branch":
            return self.has_branch(claim.value)
        if claim.kind == "script":
            return self.has_script(claim.value)
        return self.has_env(claim.value)


def failure(claim: Claim) -> str:
    """What a failed `claim` says in a note's status ("path src/x.py not found")."""
    value = re.sub(r"[\x00-\x1f\x7f-\x9f]", "?", claim.value.replace("(", "[").replace(")", "]"))
    return {"path": f"path {value} not found", "branch": f"branch {value} not found",
            "script": f"script '{value}' not defined", "env": f"variable {value} not named in the project"}[claim.kind]


@dataclass
class Report:
    """What one verification did. `failed` maps note ids to what failed; `cleared` lists
    the notes whose status was cleared; `dismissed` the notes that fail as a status the user
    undid said, which is not written again; `checked` counts the notes with claims checked,
    `without_claims` those with none; `timed_out` says the budget ran out before every note
    was checked; `revision` is the id of the revision that changed the file (None: no change)."""

    checked: int = 0
    without_claims: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    cleared: list[str] = field(default_factory=list)
    timed_out: bool = False
    revision: str | None = None
    notes: int = 0
    dismissed: dict[str, str] = field(default_factory=dict)


def verify(store: NoteStore, root: Path, *, today: dt.date | None = None, seconds: float = VERIFY_SECONDS) -> Report:
    """Check every active note of `store` against the project folder `root` and write the
    statuses that changed (see the module docstring), as one revision (backend "verifier").

    A note is checked from the file as read first; its status is written, under the store's
    lock and from the file as it is then, only where its text is still the one checked. A
    status is written only when it changes (a note failing the same way keeps its first date),
    and a status whose revision the user undid (`memsift notes undo`) is not written again for
    the same failure of the same note.
    `today` is the date of the statuses (default: today, UTC); `seconds` the budget.

    :raises OSError: the notes file or the revision log cannot be written.
    :raises revision.RevisionError: the notes file does not parse strictly (a mistyped
        header: fix it with `memsift notes edit`); nothing is written then.
    """
    from .revision import Replace, _File, apply_ops, commit, history, snapshot

    today = today or dt.datetime.now(dt.UTC).date()
    report = Report()
    if not store.markdown.exists():
        return report
    deadline = time.monotonic() + seconds
    project = Project(root, deadline)
    notes = [n for n in store.notes() if n.active]
    report.notes = len(notes)
    found = {n.id: claims(n.text) for n in notes}
    project_env = [c.value for cs in found.values() for c in cs if c.kind == "env"]
    outcome: dict[str, tuple[str, str | None]] = {}  # id -> (text hash, failure or None)
    for n in notes:
        cs = found[n.id]
        if time.monotonic() > deadline:
            report.timed_out = True
            break
        if not cs:
            report.without_claims += 1
            if n.unverified:  # edited since: nothing left to check
                outcome[n.id] = (text_hash(n.text), None)
            continue
        if project_env:
            project.names_env(project_env)  # one scan for every note's variables
            project_env = []
        results = [(c, project.check(c)) for c in cs]
        if any(r is None for _, r in results) and not any(r is False for _, r in results):
            continue  # cannot tell: the status stays as it is
        report.checked += 1
        failed = [c for c, r in results if r is False]
        outcome[n.id] = (text_hash(n.text), "; ".join(failure(c) for c in failed[:2]) if failed else None)
    with store.lock():
        text, sha = snapshot(store)
        f = _File.read(text)
        dismissed = _dismissed(history(store))
        ops = []
        for n in f.parsed.notes:
            if n.id not in outcome or outcome[n.id][0] != text_hash(n.text) or not n.active:
                continue
            what = outcome[n.id][1]
            old_reason = n.unverified.rsplit(",", 1)[0].strip() if n.unverified else None
            if what == old_reason:
                if what:
                    report.failed[n.id] = n.unverified
                continue
            if what and (n.id, what) in dismissed:
                report.dismissed[n.id] = what
                continue  # the user undid this very status: it is not written again
            i = f.spans[n.id].start
            head = re.sub(r" +· +unverified +\([^()]*\) *$", "", f.content[i].rstrip())
            if what:
                head += f" · unverified ({what}, {today.isoformat()})"
                report.failed[n.id] = f"{what}, {today.isoformat()}"
            else:
                report.cleared.append(n.id)
            ops.append(Replace(i + 1, f.content[i], head))
        if ops:
            after = apply_ops(text, ops)
            report.revision = commit(store, text, sha, after, action="revise", backend="verifier", ops=ops).id
    log.info("verify %s: %d notes, %d checked, %d unverified, %d cleared%s", store.folder, report.notes,
             report.checked, len(report.failed), len(report.cleared), " (out of time)" if report.timed_out else "")
    return report


def _dismissed(entries) -> set[tuple[str, str]]:
    """(note id, what failed) of each status a verifier revision wrote that was undone
    (`revision.history` entries)."""
    undone = {e.undoes for e in entries if e.action == "undo"}
    out = set()
    for e in entries:
        if e.backend != "verifier" or e.action != "revise" or e.id not in undone:
            continue
        for op in e.ops:
            m = re.match(r"## +(\S+) .* · unverified \((.*), \d{4}-\d{2}-\d{2}\) *$", str(op.get("new", "")))
            if m:
                out.add((m[1], m[2]))
    return out
