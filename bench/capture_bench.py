"""Benchmark capture on a large transcript: streaming memory, reading speed, and the whole run.

Usage: python bench/capture_bench.py [--mb 300] [--exchanges 200]

Writes a Claude Code transcript of about `--mb` megabytes to a temp folder: `--exchanges`
exchanges whose user and assistant texts come from the dev conversations, padded with large
tool results (the bulk of real transcripts), a few lines over `MAX_LINE_BYTES`, and
memsift's own pastes as attachments. Then, each in a fresh child process (max RSS from
`os.wait4`):

1. `read_exchanges` over the whole file (the streaming reader alone);
2. `memsift capture --final` with the embedded model (masking, selection, notes, passages,
   revision), and a second run to show it adds nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONVERSATIONS = ROOT / "eval" / "conversations"


def write_transcript(path: Path, mb: int, n: int) -> int:
    turns = [t for f in sorted(CONVERSATIONS.glob("*.json")) for t in json.loads(f.read_text())["turns"]]
    filler = "x" * 200_000
    per_exchange = mb * 1024 * 1024 // n
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            t = turns[i % len(turns)]
            fh.write(json.dumps({"type": "user", "uuid": f"u{i}", "message": {"role": "user", "content": t["user"]}}) + "\n")
            fh.write(json.dumps({"type": "attachment", "attachment": {"type": "hook_additional_context",
                                 "content": ["memsift recall: [memsift note N01 · 2026-01-01 · decision] x"]}}) + "\n")
            written = 0
            while written < per_exchange:
                size = 6 * 1024 * 1024 if i % 50 == 7 and written == 0 else len(filler)  # a few huge lines
                line = json.dumps({"type": "user", "message": {"content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": ("y" * size) if size != len(filler) else filler}]}})
                fh.write(line + "\n")
                written += len(line)
            fh.write(json.dumps({"type": "assistant", "uuid": f"a{i}", "message": {
                "id": f"m{i}", "content": [{"type": "text", "text": t["assistant"]}]}}) + "\n")
    return path.stat().st_size


def child(code: list[str], env: dict) -> tuple[float, float, str]:
    start = time.perf_counter()
    proc = subprocess.Popen(code, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, out.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=300)
    parser.add_argument("--exchanges", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memsift-capture-bench-") as tmp:
        tmp = Path(tmp)
        path = tmp / "session.jsonl"
        size = write_transcript(path, args.mb, args.exchanges)
        print(f"transcript: {size / 1e6:.0f} MB, {args.exchanges} exchanges")
        env = {**os.environ, "MEMSIFT_HOME": str(tmp / "home")}
        read = [sys.executable, "-c", "import sys; from memsift.transcript import read_exchanges; "
                "print(sum(1 for _ in read_exchanges(sys.argv[1], final=True)), 'exchanges')", str(path)]
        secs, rss, out = child(read, env)
        print(f"read_exchanges: {out} in {secs:.1f} s, max RSS {rss:.0f} MB")
        (tmp / "proj").mkdir()
        run = [sys.executable, "-m", "memsift", "capture", "--transcript", str(path), "--session", "bench",
               "--cwd", str(tmp / "proj"), "--final"]
        for label in ("capture", "capture again"):
            secs, rss, out = child(run, env)
            print(f"{label}: {out} in {secs:.1f} s, max RSS {rss:.0f} MB")


if __name__ == "__main__":
    main()
