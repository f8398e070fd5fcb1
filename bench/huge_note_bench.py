"""Benchmark one prompt against a project whose notes.md holds one huge note written by hand.

Usage: python bench/huge_note_bench.py [--mb 5 50] [--prompts 3]

For each size, a temporary MEMSIFT_HOME gets a right small note through `memsift notes add`,
then a note of that many MB appended to notes.md by hand (as a user pasting a log would);
then `python -m memsift hook user-prompt-submit` runs once per prompt as Claude Code runs it
(JSON on stdin), each a new process. The first prompt pays the reindex of the edited
notes.md (NoteStore's, not recall's); the next ones are the steady per-prompt cost. Prints
whole-process wall time and max RSS (from `os.wait4`), and which note was pasted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hook_bench import spawn  # noqa: E402

RIGHT = "Payment provider: we chose Adyen over Stripe because Adyen supports SEPA direct debit for German customers."
ASK = "why did we choose Adyen over Stripe?"
LINE = "2026-09-02T10:00:00Z payments worker: retry charge for order 1042 via Adyen, Stripe fallback off. "


def run(mb: float, prompts: int) -> None:
    with tempfile.TemporaryDirectory(prefix="memsift-huge-") as tmp:
        home, project = Path(tmp) / "home", Path(tmp) / "shop"
        (project / ".git").mkdir(parents=True)
        env = {**os.environ, "MEMSIFT_HOME": str(home)}
        subprocess.run([sys.executable, "-m", "memsift", "notes", "add", "--project", str(project), "--kind",
                        "decision", "--date", "2026-09-01", RIGHT], check=True, env=env, capture_output=True)
        notes_md = next((home / "projects").glob("shop-*")) / "notes.md"
        body = LINE * int(mb * 1_000_000 / len(LINE))
        with open(notes_md, "a", encoding="utf-8") as fh:
            fh.write(f"\n## N002 · 2026-09-02 · context\n{body}\n")
        for i in range(prompts):
            payload = json.dumps({"session_id": f"bench-{i}", "transcript_path": "", "cwd": str(project),
                                  "hook_event_name": "UserPromptSubmit", "prompt": ASK}).encode()
            ms, kb, out = spawn(payload, env)
            context = json.loads(out)["hookSpecificOutput"]["additionalContext"] if out else ""
            pasted = [line.split(" ")[2] for line in context.split("\n")[1:]]
            print(f"{mb:g} MB note, prompt {i + 1}{' (reindex)' if i == 0 else ''}: wall {ms / 1000:.2f} s, "
                  f"max RSS {kb / 1024:.0f} MB, pasted {pasted or 'nothing'} ({len(context)} chars)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[5, 50])
    parser.add_argument("--prompts", type=int, default=3)
    args = parser.parse_args()
    for mb in args.mb:
        run(mb, args.prompts)


if __name__ == "__main__":
    main()
