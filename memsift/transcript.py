"""The previous turns of a Claude Code session, read from its transcript JSONL.

The format is internal to Claude Code (reverse-engineered notes in the research file
`hosts.md`, section C): `user` lines carry the prompt as a string or `text` blocks,
`assistant` lines carry `text` blocks, `attachment` lines carry injected hook context.
Only the tail of the file is read, so a long session costs the same as a short one.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

TAIL_BYTES = 512 * 1024
_WRAPPER = re.compile(r"<(system-reminder|command-name|local-command-stdout)>.*?</\1>", re.DOTALL)
#: How memsift frames each pasted item; ids are read back from it.
FRAME = re.compile(r"\[memsift (?:note|passage) (?P<id>[^\s\]·]+)")


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


def read_transcript(path: str | Path, max_turns: int) -> tuple[list[Turn], set[str]]:
    """The last `max_turns` turns, oldest first, and the ids memsift pasted in the session.

    A missing or unreadable file, or anything but a regular file (a FIFO or a device would
    block or never end), gives `([], set())`: the transcript is context, never required.
    """
    if not isinstance(path, (str, Path)) or not str(path):
        return [], set()
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return [], set()
        with open(path, "rb") as fh:
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
        try:
            entry = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            continue
        if not isinstance(entry, dict):
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
