"""Host transcripts: the previous turns of a session, and its exchanges for capture.

Claude Code writes `~/.claude/projects/<project>/<session>.jsonl`; Codex writes rollouts,
`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`. Both formats are internal to their hosts
(reverse-engineered notes in the research file `hosts.md`, sections C and D5):

- Claude Code: `user` lines carry the prompt as a string or `text` blocks (tool results are
  `tool_result` blocks, skipped), `assistant` lines carry `text` blocks (one message may
  span several lines), `attachment` lines carry injected hook context, memsift's own
  pastes included, so they are never read as conversation;
- Codex: `{"type", "payload"}` lines; the user's text is `event_msg` / `user_message`, the
  agent's is a `response_item` message of role `assistant`; `developer` items (where hook
  context lands) are skipped.

`read_transcript` reads only the tail of a Claude Code transcript (for the prompt hook);
`read_exchanges` streams either format from a byte offset (for capture).
"""

from __future__ import annotations

import heapq
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

TAIL_BYTES = 512 * 1024
_WRAPPER = re.compile(r"<(system-reminder|command-name|local-command-stdout)>.*?</\1>", re.DOTALL)
#: How memsift frames each pasted item (`frame_line`); ids are read back from it.
FRAME = re.compile(r"\[memsift (?:note|passage) (?P<id>[^\s\]·]+)")
#: What in a stored text could pass for memsift's own framing: a frame's opening (`[memsift`,
#: any case, an ASCII or a full-width bracket, spaces or zero-width characters between) and
#: the paste header's opening (`memsift recall (` / `memsift recall:`, see `recall.HEADER`).
_FORGED_FRAME = re.compile(r"(?i)[\[\uff3b\u3010\u3014\u27e6](?=[\s\u200b-\u200f\u2060\ufeff]*m\s*e\s*m\s*s\s*i\s*f\s*t)")
_FORGED_HEADER = re.compile(r"(?i)\b(memsift)\s+(recall)(?=\s*[(:])")
#: Invisible characters that could hide a forged frame from a reader or from `FRAME`:
#: zero-width spaces and joiners, bidirectional overrides and isolates, the BOM.
_INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
#: Terminal control sequences (ANSI CSI and OSC: colours, "clear screen", "set the window
#: title", ECMA-48) and the other C0 / C1 control characters but tab and newline: an agent's
#: answer quoting coloured tool output must not carry them into a note, a paste or a terminal.
CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape_stored(text: str) -> str:
    """`text` (a stored note or passage) with nothing that reads as memsift's own frame or
    header: a bracket opening `memsift` becomes `(`, `memsift recall (` becomes
    `memsift-recall (`, and invisible and control characters (`CONTROL`) are dropped.

    After it, `FRAME` finds nothing in the text, so only memsift's own frames are read back
    as pasted ids. Idempotent; it never lengthens the text.
    """
    text = CONTROL.sub("", _INVISIBLE.sub("", text))
    text = _FORGED_FRAME.sub("(", text)
    return _FORGED_HEADER.sub(r"\1-\2", text)


def frame_line(tier: str, item_id: str, date: str, kind: str | None, text: str) -> str:
    """One framed item, as pasted and as stored on a memory server:
    `[memsift note N07 · 2026-08-14 · decision] text` (empty fields left out).

    `text` goes through `escape_stored`, so the frame written here is the line's only one.
    """
    meta = " · ".join(x for x in (item_id, date, kind) if x)
    return f"[memsift {tier} {meta}] {escape_stored(text)}"


@dataclass(frozen=True)
class Turn:
    """One exchange: what the user typed and what the agent answered (text only)."""

    user: str
    assistant: str = ""


def _texts(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _json_object(line: bytes) -> dict | None:
    """One transcript line as a JSON object (bad UTF-8 replaced), or None for anything else."""
    try:
        entry = json.loads(line.decode("utf-8", "replace"))
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def open_regular(path: str | Path):
    """`path` opened for reading in binary, if it is a regular file.

    Raises `OSError` for anything else too: a FIFO blocks until a writer comes, and a device
    such as `/dev/zero` never ends, so a transcript must be a file. The check is on the
    opened file (`os.fstat`), never on the name, so the file cannot be swapped between the
    two; a FIFO is opened without blocking.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_transcript(path: str | Path, max_turns: int) -> tuple[list[Turn], set[str]]:
    """The last `max_turns` turns, oldest first, and the ids memsift pasted in the session.

    A missing or unreadable file, or anything but a regular file (a FIFO or a device would
    block or never end), gives `([], set())`: the transcript is context, never required.
    """
    if not isinstance(path, (str, Path)) or not str(path):
        return [], set()
    try:
        with open_regular(path) as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - TAIL_BYTES))
            raw = fh.read()
    except OSError:
        return [], set()
    lines = raw.split(b"\n")
    if size > TAIL_BYTES:
        lines = lines[1:]  # the first line is cut
    turns: list[Turn] = []
    pasted: set[str] = set()
    seen: set[tuple] = set()
    for line in lines:
        entry = _json_object(line)
        if entry is None:
            continue
        kind = entry.get("type")
        if kind == "attachment":
            pasted.update(m["id"] for m in FRAME.finditer(json.dumps(entry, ensure_ascii=False)))
            continue
        if kind not in ("user", "assistant") or entry.get("isMeta") or entry.get("isSidechain"):
            continue
        message = entry.get("message")
        if not isinstance(message, dict):
            continue
        text = _WRAPPER.sub("", _texts(message.get("content"))).strip()
        if not text:
            continue
        if kind == "user":
            turns.append(Turn(user=text))
        else:
            key = (message.get("id"), entry.get("uuid"))
            if key in seen:
                continue
            seen.add(key)
            if turns:
                last = turns[-1]
                turns[-1] = Turn(last.user, (last.assistant + "\n" + text).strip())
            else:
                turns.append(Turn(user="", assistant=text))
    return turns[-max_turns:], pasted


#: A line longer than this (a pasted image, a huge tool output) is skipped unread.
MAX_LINE_BYTES = 4 * 1024 * 1024
#: Characters kept of each side of an exchange.
MAX_EXCHANGE_CHARS = 6000
#: Sentences kept from the part of a long answer past `MAX_EXCHANGE_CHARS`, and the length
#: past which a "sentence" (a table row, a log line) is not one (`Exchange.salient`).
SALIENT_SENTENCES = 6
SALIENT_SENTENCE_CHARS = 400
#: Where a text splits into sentences: after `.!?;` and a space, after CJK stops, at newlines.
SENTENCE_BREAK = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])|\n+")


@dataclass(frozen=True)
class Exchange:
    """One user message and the agent's text answer, with the byte offsets they span.

    `start` is the offset of the user's line and `end` the offset just after the exchange's
    last line, in the transcript file.
    """

    user: str
    assistant: str
    start: int
    end: int
    date: str = ""  # YYYY-MM-DD of the user's message, when the transcript says
    #: From an answer longer than `MAX_EXCHANGE_CHARS`: the sentences past that point that
    #: the reader's `salience` scored highest, in their order (a decision at the end of a
    #: pasted report is not lost with the cut).
    salient: tuple[str, ...] = ()


class _Answer:
    """An answer read part by part in bounded memory: its first `MAX_EXCHANGE_CHARS`, and
    of the rest the `SALIENT_SENTENCES` sentences `salience` scores highest (above 0; the
    earliest first among equals). Parts seen already (one message over several lines) are
    added once."""

    def __init__(self, salience: Callable[[str], float] | None) -> None:
        self.salience = salience
        self.head: list[str] = []
        self.size = 0
        self.top: list[tuple[float, int, str]] = []  # a min-heap of (score, -position, sentence)
        self.count = 0
        self.seen: set[tuple] = set()

    def add(self, text: str, key: tuple | None = None) -> None:
        if key is not None:
            if key in self.seen:
                return
            self.seen.add(key)
        room = MAX_EXCHANGE_CHARS - self.size
        if room > 0:
            self.head.append(text[:room])
            self.size += min(len(text), room) + 1
            text = text[room:]
        if not text or self.salience is None:
            return
        for sentence in SENTENCE_BREAK.split(text):
            sentence = sentence.strip()
            if not sentence or len(sentence) > SALIENT_SENTENCE_CHARS:
                continue
            self.count += 1
            score = self.salience(sentence)
            if score <= 0:
                continue
            entry = (score, -self.count, sentence)
            if len(self.top) < SALIENT_SENTENCES:
                heapq.heappush(self.top, entry)
            elif entry > self.top[0]:
                heapq.heapreplace(self.top, entry)

    def text(self) -> str:
        return "\n".join(self.head)[:MAX_EXCHANGE_CHARS]

    def salient(self) -> tuple[str, ...]:
        return tuple(s for _, _, s in sorted(self.top, key=lambda e: -e[1]))


def _lines(fh, offset: int) -> Iterator[tuple[int, int, bytes | None]]:
    """`(start, end, line)` for each complete line from `offset`; `line` is None for a line
    over `MAX_LINE_BYTES` (skipped without holding it in memory). A last line without its
    newline is still being written: it is not yielded."""
    fh.seek(offset)
    pos = offset
    while True:
        line = fh.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            start = pos
            pos += len(line)
            while True:  # skip the rest of the oversized line in bounded chunks
                chunk = fh.readline(MAX_LINE_BYTES)
                if not chunk:
                    return
                pos += len(chunk)
                if chunk.endswith(b"\n"):
                    break
            yield start, pos, None
            continue
        if not line.endswith(b"\n"):
            return
        yield pos, pos + len(line), line
        pos += len(line)


def _message(entry: dict) -> tuple[str, str] | None:
    """`("user" | "assistant", text)` for a conversation line of either host, else None."""
    kind = entry.get("type")
    if kind in ("user", "assistant"):  # Claude Code
        if entry.get("isMeta") or entry.get("isSidechain") or entry.get("isCompactSummary"):
            return None
        message = entry.get("message")
        if not isinstance(message, dict):
            return None
        text = _WRAPPER.sub("", _texts(message.get("content"))).strip()
        return (kind, text) if text else None
    payload = entry.get("payload")
    if not isinstance(payload, dict):
        return None
    if kind == "event_msg" and payload.get("type") == "user_message":  # Codex
        text = payload.get("message")
        return ("user", text.strip()) if isinstance(text, str) and text.strip() else None
    if kind == "response_item" and payload.get("type") == "message" and payload.get("role") == "assistant":
        content = payload.get("content")
        parts = [b.get("text", "") for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        text = "\n".join(p for p in parts if isinstance(p, str)).strip()
        return ("assistant", text) if text else None
    return None


def read_exchanges(
    path: str | Path,
    offset: int = 0,
    *,
    final: bool = False,
    last_answer: str | None = None,
    salience: Callable[[str], float] | None = None,
) -> Iterator[Exchange]:
    """Stream the exchanges of a Claude Code transcript or a Codex rollout from `offset`.

    An exchange is complete when the next user message starts; with `final` (the session
    ended or is compacting) the last one is complete too, unless the file ends in a line
    still being written. `last_answer` is the agent's last message as the host's `Stop`
    payload gives it (`last_assistant_message`): the turn is over, so the last exchange is
    complete with it, whether or not the file holds it yet (Claude Code writes it after the
    hook; hosts.md, B2). It is added unless the file's answer holds it already;
    when the file catches up, those lines come before the next user message, past this
    exchange's `end`, and are skipped. Only complete exchanges are yielded, so
    `exchange.end` of the last one is where the next capture resumes.

    Memory stays bounded whatever the file's size: lines are read one at a time, oversized
    lines are skipped, each side of an exchange keeps `MAX_EXCHANGE_CHARS`, and of a longer
    answer `salience` (a sentence's score; None: nothing) picks the sentences to keep
    (`Exchange.salient`).

    Raises `OSError` if the file cannot be opened or is not a regular file (`open_regular`).
    """
    with open_regular(path) as fh:
        user: str | None = None
        answer = _Answer(salience)
        start = end = last = offset
        date = ""
        last_part = None  # the text of the open exchange's last answer part
        for line_start, line_end, line in _lines(fh, offset):
            last = line_end
            entry = _json_object(line) if line is not None else None
            found = _message(entry) if entry is not None else None
            if found is None:
                if user is not None:
                    end = line_end
                continue
            role, text = found
            if role == "user":
                if user is not None:
                    yield Exchange(user, answer.text(), start, line_start, date, answer.salient())
                # a new answer: "Done." may well answer two exchanges
                user, answer, start, end, last_part = text[:MAX_EXCHANGE_CHARS], _Answer(salience), line_start, line_end, None
                stamp = entry.get("timestamp")
                date = stamp[:10] if isinstance(stamp, str) and re.match(r"\d{4}-\d{2}-\d{2}", stamp) else ""
            elif user is not None:
                message = entry.get("message") if isinstance(entry.get("message"), dict) else {}
                answer.add(text, (message.get("id"), entry.get("uuid"), text))
                last_part = text
                end = line_end
        if user is None:
            return
        said = (last_answer or "").strip()
        if said:
            if (last_part or "").strip() != said and said[:500] not in answer.text():  # not in the file yet
                answer.add(said)
            yield Exchange(user, answer.text(), start, max(end, last), date, answer.salient())
        # a last line still being written may hold the end of the answer: wait for it
        elif final and last == os.fstat(fh.fileno()).st_size:
            yield Exchange(user, answer.text(), start, end, date, answer.salient())


#: Lines `session_cwd` reads at most from the start of a transcript.
CWD_MAX_LINES = 500


def session_cwd(path: str | Path) -> str | None:
    """The folder the session started in, as its transcript records it, else None.

    Claude Code puts a `cwd` on each conversation line (it follows the agent's `cd`; the
    first one is where the session started); a Codex rollout puts it in the `session_meta`
    line's payload, and again in each `turn_context` (research file `hosts.md`, sections
    C and D5). The first of these within `CWD_MAX_LINES` lines is returned. Raises
    `OSError` if the file cannot be opened or is not a regular file (`open_regular`).
    """
    with open_regular(path) as fh:
        for n, (_, _, line) in enumerate(_lines(fh, 0)):
            if n >= CWD_MAX_LINES:
                return None
            if line is None or b'"cwd"' not in line:
                continue
            entry = _json_object(line)
            if entry is None:
                continue
            payload = entry.get("payload")
            if entry.get("type") in ("session_meta", "turn_context") and isinstance(payload, dict):
                cwd = payload.get("cwd")
            else:
                cwd = entry.get("cwd")
            if isinstance(cwd, str) and cwd.strip():
                return cwd
    return None
