"""The notes file format: one Markdown file per project, a section per note.

Layout of `notes.md` (one section per note; everything else is ignored)::

    # memsift notes: shop

    ## N07 · 2026-08-14 · decision
    Payments: Mollie chosen over Stripe because ...

    ## N03 · 2026-06-02 · decision · session 5e1f0c2a · superseded by N07
    Payments go through Stripe ...

    ## N02 · 2026-05-11 · context · retired 2026-09-30
    The staging cluster is down for the migration ...

    ## N09 · 2026-09-01 · context · unverified (path src/pay.py not found, 2026-12-02)
    The payment code lives in `src/pay.py`.

A note captured from a session names it (`session <id>`); one added by hand does not. A
retired note (`retired <date>`: the agent's `memsift_forget`, undone with `memsift notes
undo`) stays in the file, and is never searched or pasted. A note whose concrete claim
failed its last check (`memsift.verify`) says what failed and when (`unverified (<what
failed>, <YYYY-MM-DD>)`, last in the header).

This module only reads and writes that text (`parse_markdown`, `render_markdown`,
`check_note`) and writes files atomically; `notes.NoteStore` owns the files and the index,
`revision` edits the text by line operations. It imports nothing of memsift's.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .config import name_text

KINDS = ("decision", "constraint", "incident", "convention", "context")
_HEADER = re.compile(
    r"^## +(?P<id>[A-Za-z0-9][\w.-]*) +· +(?P<date>\d{4}-\d{2}-\d{2}) +· +(?P<kind>\w+)"
    r"(?: +· +session +(?P<session>[\w.-]+))?"
    r"(?: +· +superseded by +(?P<by>[A-Za-z0-9][\w.-]*))?"
    r"(?: +· +retired +(?P<retired>\d{4}-\d{2}-\d{2}))?"
    r"(?: +· +unverified +\((?P<unverified>[^()\r\n]*)\))? *$"
)
#: Characters a note may hold when written through memsift (`check_note`), and of a longer
#: note edited in by hand that the index keeps (`indexed_text`). A note is what is pasted:
#: memsift pastes at most `Settings.max_chars` in all, and e5 reads at most 512 tokens (about
#: 2,000 characters of English), so a longer note is never recalled whole; a cap keeps every
#: per-prompt cost (reading, masking, judging, pasting) bounded by it.
MAX_NOTE_CHARS = 4000


class NotesFormatError(ValueError):
    """The notes Markdown cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Note:
    """One note. `session` is the host session it was captured from (None when added by
    hand); `superseded_by` is the id of the newer note that replaces it, if any; `retired`
    the date (YYYY-MM-DD) it was retired on, if it was; `unverified` is what its last failed
    check found and when (`"path src/x.py not found, 2026-12-02"`, `memsift.verify`), None
    when no check failed."""

    id: str
    date: str
    kind: str
    text: str
    superseded_by: str | None = None
    session: str | None = None
    retired: str | None = None
    unverified: str | None = None

    @property
    def active(self) -> bool:
        """Neither superseded nor retired: a note recall may search and paste."""
        return self.superseded_by is None and self.retired is None


@dataclass(frozen=True)
class NotesFile:
    """A parsed notes file: the text before the first note (kept verbatim), the notes, and
    the problems found when read leniently."""

    preamble: str
    notes: list[Note]
    problems: list[str]


def parse_markdown(text: str, source: str = "notes.md", strict: bool = True) -> NotesFile:
    """Read a notes Markdown file.

    Text above the first note header is the preamble, whatever it holds. Below it, strict
    (before any write): a `## ` line that is not a valid note header, or an id used
    twice, raises `NotesFormatError` naming the file and line, so that nothing is rewritten
    from a file memsift misread. Lenient (for recall): such a line stays in the text of the
    note above it, a repeated id is skipped, and each problem is listed in `problems`.
    """
    text = text.removeprefix("\ufeff")
    notes: list[Note] = []
    problems: list[str] = []
    preamble: list[str] = []
    current: dict | None = None
    body: list[str] = []
    seen: set[str] = set()

    def close() -> None:
        if current is None:
            return
        if current["id"] in seen:
            problem = f"{source}:{current['line']}: note id {current['id']} appears twice"
            if strict:
                raise NotesFormatError(problem)
            problems.append(problem + " (the second is ignored)")
            return
        seen.add(current["id"])
        fields = {k: v for k, v in current.items() if k != "line"}
        notes.append(Note(text="\n".join(body).strip(), **fields))

    for lineno, line in enumerate(text.splitlines(), 1):
        m = _HEADER.match(line.rstrip()) if line.startswith("## ") else None
        problem = None
        if current is None and not m:
            preamble.append(line)  # above the first note, any text is the user's, `## ` headings too
            continue
        if line.startswith("## ") and not m:
            problem = f"{source}:{lineno}: expected '## <id> · <YYYY-MM-DD> · <kind>', got {line!r}"
        elif m and m["kind"] not in KINDS:
            problem = f"{source}:{lineno}: kind {m['kind']!r} is not one of {', '.join(KINDS)}"
        elif m and (bad := next((d for d in (m["date"], m["retired"]) if d and not _real_date(d)), None)):
            problem = f"{source}:{lineno}: date {bad!r} is not a date of the calendar"
        if problem:
            if strict:
                raise NotesFormatError(problem)
            problems.append(problem + " (read as text)")
            m = None
        if m:
            close()
            current, body = {"id": m["id"], "date": m["date"], "kind": m["kind"], "superseded_by": m["by"],
                             "session": m["session"], "retired": m["retired"], "unverified": m["unverified"],
                             "line": lineno}, []
        elif current is not None:
            body.append(line)
        else:
            preamble.append(line)
    close()
    return NotesFile("\n".join(preamble).rstrip(), notes, problems)


def _real_date(text: str) -> bool:
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def default_preamble(title: str) -> str:
    """The first lines of a new notes file, for the project `title` (its folder's name; bytes
    of a name that is not UTF-8 are written as U+FFFD, so that the file is)."""
    title = name_text(title)
    return "\n".join([
        f"# memsift notes: {title}",
        "",
        "<!-- One section per note. Edit the text freely; keep each header line's shape:",
        "     ## <id> · <YYYY-MM-DD> · <decision|constraint|incident|convention|context>[ · session <id>][ · superseded by <id>][ · retired <YYYY-MM-DD>][ · unverified (<what failed>, <date>)]",
        "     Text above the first note is kept as it is. -->",
    ])


def render_markdown(preamble: str, notes: Iterable[Note]) -> str:
    """The Markdown file: `preamble` verbatim, then `notes` in the order given."""
    out = [preamble]
    for n in notes:
        head = f"## {n.id} · {n.date} · {n.kind}"
        if n.session:
            head += f" · session {n.session}"
        if n.superseded_by:
            head += f" · superseded by {n.superseded_by}"
        if n.retired:
            head += f" · retired {n.retired}"
        if n.unverified:
            head += f" · unverified ({n.unverified})"
        out += ["", head, n.text.strip()]
    return "\n".join(out) + "\n"


def check_note(note: Note) -> None:
    """Raise `ValueError` for a note memsift could not write and read back as it is."""
    if note.kind not in KINDS:
        raise ValueError(f"kind {note.kind!r} is not one of {', '.join(KINDS)}")
    try:
        dt.date.fromisoformat(note.date)
    except ValueError:
        raise ValueError(f"date {note.date!r} is not YYYY-MM-DD") from None
    if not note.text.strip():
        raise ValueError("the note's text is empty")
    if len(note.text) > MAX_NOTE_CHARS:
        raise ValueError(f"the note has {len(note.text):,} characters, more than the {MAX_NOTE_CHARS:,} a note may "
                         f"hold: split it into several notes, or keep the long text in a file and note where it is")
    if any(line.startswith("## ") for line in note.text.splitlines()):
        raise ValueError("a line of the text starts with '## ', which the notes file keeps for note headers")
    if note.session and not re.fullmatch(r"[\w.-]+", note.session):
        raise ValueError(f"session {note.session!r} must be letters, digits, '.', '_' or '-'")
    if note.id and not re.fullmatch(r"[A-Za-z0-9][\w.-]*", note.id):
        raise ValueError(f"id {note.id!r} must be letters, digits, '.', '_' or '-'")
    if note.unverified is not None and (not note.unverified.strip() or re.search(r"[()\r\n]", note.unverified)):
        raise ValueError(f"status unverified ({note.unverified!r}) must be one line without parentheses")


def serial(note_id: str) -> int | None:
    """The number of an id memsift assigned (`N007` -> 7), None for any other id."""
    m = re.fullmatch(r"N(\d+)", note_id)
    return int(m[1]) if m else None


def keep_serials(folder: Path, texts: Iterable[str]) -> None:
    """Raise `<folder>/last_id`, the highest note number memsift ever gave (`serial`), to the
    highest among the notes in `texts` (notes files), so that an id is never given again
    once its note is deleted. Raises `OSError` when the file cannot be written."""
    path = Path(folder) / "last_id"
    try:
        last = int(path.read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        last = 0
    numbers = [k for text in texts for n in parse_markdown(text, strict=False).notes if (k := serial(n.id)) is not None]
    if max(numbers, default=0) > last:
        atomic_write(path, f"{max(numbers)}\n")


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write `data` (a str as UTF-8 with its newlines as they are, bytes that `decode` kept
    as surrogate escapes written back as they were; or bytes exactly) to `path` through a temp file, fsync and `os.replace`; an existing file keeps its
    permissions, a new one gets the umask's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def text_hash(text: str) -> str:
    """The sha1 hex digest of `text` as UTF-8 (surrogate escapes as the bytes they stand for)."""
    return hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()


_ESCAPED = re.compile("[\udc80-\udcff]")


def decode(raw: bytes, source: str = "notes.md") -> tuple[str, list[str]]:
    """The text of a notes file and the problems found in its encoding.

    Valid UTF-8 decodes as it is. A byte that is not UTF-8 is kept as a surrogate escape
    (Python's `surrogateescape` error handler, PEP 383), so that a writer that rewrites the
    text (`atomic_write`) puts every byte back as it was; each such line is a problem naming
    the file, line and column. Use `clean` on text that leaves the file (index, paste, screen).
    """
    try:
        return raw.decode("utf-8"), []
    except UnicodeDecodeError:
        pass
    text = raw.decode("utf-8", "surrogateescape")
    problems = []
    for lineno, line in enumerate(text.removeprefix("\ufeff").splitlines(), 1):
        if m := _ESCAPED.search(line):
            problems.append(f"{source}:{lineno}: not UTF-8 (byte 0x{ord(m[0]) - 0xDC00:02x} at column {m.start() + 1}); "
                            f"read as \ufffd; fix the line with `memsift notes edit`")
    return text, problems


def clean(text: str) -> str:
    """`text` with the surrogate escapes of `decode` replaced by U+FFFD."""
    return _ESCAPED.sub("\ufffd", text)

