"""Benchmark capture as a whole process: an 80-exchange session, a 100,000-line Claude Code
transcript and a 20,000-line Codex rollout, with time and max RSS.

Usage: python bench/capture_bench.py [--exchanges 80] [--claude-lines 100000]
       [--codex-lines 20000] [--mb 0]

Each case runs `python -m memsift capture --final` in a fresh child process (max RSS from
`os.wait4`) against a temporary MEMSIFT_HOME, with the embedded defaults:

1. a session of `--exchanges` exchanges whose texts are the dev conversations' turns
   (masking, selection, notes, passages, revision), then a second run that adds nothing;
2. a Claude Code transcript of `--claude-lines` lines and a Codex rollout of
   `--codex-lines` lines: routine exchanges (tool calls, 1.5 KB tool results), nothing worth
   a note, so every exchange is judged. A run stops at its time limit
   (`MEMSIFT_CAPTURE_SECONDS`, default 20 s) and the next goes on; the figures say how far
   the first run got and how fast it judged;
3. with `--mb N`, the streaming reader alone (`read_exchanges`) over an N MB transcript
   padded with large tool results and lines over `MAX_LINE_BYTES`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONVERSATIONS = ROOT / "eval" / "conversations"
TOOL_OUTPUT = "collected 212 items ... " + "." * 1500


def dev_session(path: Path, n: int, cwd: Path) -> None:
    turns = [t for f in sorted(CONVERSATIONS.glob("*.json")) for t in json.loads(f.read_text())["turns"]]
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            t = turns[i % len(turns)]
            for entry in (
                {"type": "user", "uuid": f"u{i}", "cwd": str(cwd), "timestamp": "2026-11-30T10:00:00Z",
                 "message": {"role": "user", "content": t["user"]}},
                {"type": "attachment", "attachment": {"type": "hook_additional_context",
                                                      "content": ["memsift recall: [memsift note N01 · 2026-01-01 · decision] x"]}},
                {"type": "assistant", "uuid": f"a{i}", "message": {"id": f"m{i}", "content": [{"type": "tool_use", "name": "Bash", "input": {}}]}},
                {"type": "user", "uuid": f"t{i}", "message": {"content": [{"type": "tool_result", "content": TOOL_OUTPUT}]}},
                {"type": "assistant", "uuid": f"b{i}", "message": {"id": f"n{i}", "content": [{"type": "text", "text": t["assistant"]}]}},
            ):
                fh.write(json.dumps(entry) + "\n")


def claude_transcript(path: Path, lines: int, cwd: Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for n in range(0, lines, 4):
            for entry in (
                {"type": "user", "uuid": f"u{n}", "cwd": str(cwd), "message": {"role": "user", "content": f"run the tests again ({n})"}},
                {"type": "assistant", "uuid": f"a{n}", "message": {"id": f"m{n}", "content": [{"type": "tool_use", "name": "Bash", "input": {}}]}},
                {"type": "user", "uuid": f"t{n}", "message": {"content": [{"type": "tool_result", "content": TOOL_OUTPUT}]}},
                {"type": "assistant", "uuid": f"b{n}", "message": {"id": f"n{n}", "content": [{"type": "text", "text": "All 212 tests pass."}]}},
            ):
                fh.write(json.dumps(entry) + "\n")


def codex_rollout(path: Path, lines: int, cwd: Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "session_meta", "payload": {"id": "x", "cwd": str(cwd)}}) + "\n")
        for n in range(1, lines, 4):
            for entry in (
                {"type": "event_msg", "payload": {"type": "user_message", "message": f"run the linter again ({n})"}},
                {"type": "response_item", "payload": {"type": "function_call", "name": "shell", "arguments": "{}"}},
                {"type": "response_item", "payload": {"type": "function_call_output", "output": "ok " + "." * 1500}},
                {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                                      "content": [{"type": "output_text", "text": "No lint errors."}]}},
            ):
                fh.write(json.dumps(entry) + "\n")


def padded_transcript(path: Path, mb: int, n: int = 200) -> None:
    turns = [t for f in sorted(CONVERSATIONS.glob("*.json")) for t in json.loads(f.read_text())["turns"]]
    filler = "x" * 200_000
    per_exchange = mb * 1024 * 1024 // n
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            t = turns[i % len(turns)]
            fh.write(json.dumps({"type": "user", "uuid": f"u{i}", "message": {"role": "user", "content": t["user"]}}) + "\n")
            written = 0
            while written < per_exchange:
                size = 6 * 1024 * 1024 if i % 50 == 7 and written == 0 else len(filler)  # a few huge lines
                line = json.dumps({"type": "user", "message": {"content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": ("y" * size) if size != len(filler) else filler}]}})
                fh.write(line + "\n")
                written += len(line)
            fh.write(json.dumps({"type": "assistant", "uuid": f"a{i}", "message": {
                "id": f"m{i}", "content": [{"type": "text", "text": t["assistant"]}]}}) + "\n")


def child(code: list[str], env: dict) -> tuple[float, float, str]:
    """Run `code`: seconds from spawn to exit, max RSS in MB, its output."""
    start = time.perf_counter()
    proc = subprocess.Popen(code, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, out.strip()


def capture(path: Path, session: str, cwd: Path, env: dict) -> tuple[float, float, str]:
    return child([sys.executable, "-m", "memsift", "capture", "--transcript", str(path), "--session", session,
                  f"--cwd={cwd}", "--final"], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--exchanges", type=int, default=80)
    parser.add_argument("--claude-lines", type=int, default=100_000)
    parser.add_argument("--codex-lines", type=int, default=20_000)
    parser.add_argument("--mb", type=int, default=0, help="also time the streaming reader over an N MB transcript")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memsift-capture-bench-") as tmp:
        tmp = Path(tmp)
        proj = tmp / "proj"
        (proj / ".git").mkdir(parents=True)
        env = {**os.environ, "MEMSIFT_HOME": str(tmp / "home")}

        path = tmp / "dev.jsonl"
        dev_session(path, args.exchanges, proj)
        for label in ("capture", "capture again"):
            secs, rss, out = capture(path, "dev", proj, env)
            print(f"{args.exchanges} exchanges, {label}: {secs:.1f} s, max RSS {rss:.0f} MB  ({out})")

        for host, lines, write in (("Claude Code", args.claude_lines, claude_transcript),
                                   ("Codex", args.codex_lines, codex_rollout)):
            path = tmp / f"{host.split()[0].lower()}.jsonl"
            write(path, lines, proj)
            size = path.stat().st_size
            secs, rss, out = capture(path, host, proj, env)
            got = re.search(r"(\d+) exchanges read", out)
            offset = re.search(r"offset (\d+)", out)
            judged = int(got.group(1)) if got else 0
            share = int(offset.group(1)) / size if offset else 1.0
            print(f"{host}, {lines:,} lines ({size / 1e6:.0f} MB): first run {secs:.1f} s, max RSS {rss:.0f} MB, "
                  f"{judged:,} exchanges judged ({judged / max(secs, 1e-9):.0f} a second), {share:.0%} of the file  ({out})")

        if args.mb:
            path = tmp / "padded.jsonl"
            padded_transcript(path, args.mb)
            read = [sys.executable, "-c", "import sys; from memsift.transcript import read_exchanges; "
                    "print(sum(1 for _ in read_exchanges(sys.argv[1], final=True)), 'exchanges')", str(path)]
            secs, rss, out = child(read, env)
            print(f"read_exchanges over {path.stat().st_size / 1e6:.0f} MB: {out} in {secs:.1f} s, max RSS {rss:.0f} MB")


if __name__ == "__main__":
    main()
