"""Benchmark the verifier (`memsift.verify.verify`) on a large project.

Usage: python bench/verify_bench.py [--notes 500] [--files 20000] [--runs 3]

Builds, in a temporary folder, a git repository of `--files` small text files (in folders of
100, a `package.json`, a `Makefile`, 20 branches) and a notes file of `--notes` captured
notes, a mix of what notes say: a path that exists, one renamed since, a branch, a script,
an environment variable named in a file and one named nowhere (which costs a scan of every
file), and notes with no checkable claim. Then times `verify` `--runs` times in this
process: the first run writes the statuses (one revision), the next ones find them as they
are and write nothing. Prints the time of each run, the notes checked and flagged, and the
time to list the project and scan it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memsift.classifiers.encoders import HashingEncoder  # noqa: E402
from memsift.notes import Note, NoteStore  # noqa: E402
from memsift.verify import VERIFY_SECONDS, Project, verify  # noqa: E402

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "b@example.com", "GIT_CONFIG_GLOBAL": os.devnull}


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env=GIT_ENV)


def build_project(root: Path, files: int) -> None:
    for i in range(files):
        folder = root / "src" / f"pkg{i // 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{i % 100:02d}.py").write_text(
            f"import os\n\nVALUE_{i} = os.environ.get('SETTING_{i % 50}', '')\n\ndef f{i}(x):\n    return x + {i}\n" * 4)
    (root / "package.json").write_text(json.dumps({"scripts": {f"task{i}": "true" for i in range(30)}}))
    (root / "Makefile").write_text("".join(f"target{i}:\n\ttrue\n" for i in range(30)))
    git(root.parent, "init", "-q", "-b", "main", str(root))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "bench")
    for i in range(20):
        git(root, "branch", f"release-{i}")


def note_text(i: int, files: int) -> str:
    k = i % 8
    if k == 0:
        return f"The f{i} helper lives in `src/pkg{(i * 7) % (files // 100):03d}/mod{i % 100:02d}.py`."
    if k == 1:
        return f"The parser is in `src/parser{i}/main.py`."  # renamed since: fails
    if k == 2:
        return f"Hotfixes of area {i} go on the `release-{i % 25}` branch."  # 20 of 25 exist
    if k == 3:
        return f"Run `npm run task{i % 40}` before release {i}, and `make target{i % 35}`."
    if k == 4:
        return f"Workers of pool {i} read `SETTING_{i % 50}` for their size."
    if k == 5:
        return f"The payment key is read from `$PAYMENT_TOKEN_{i}`."  # named nowhere: a full scan
    return f"Decision {i}: we chose option {i % 3} because the team knows it best."


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=500)
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="memsift-verify-bench-") as tmp:
        root = Path(tmp) / "project"
        t0 = time.perf_counter()
        build_project(root, args.files)
        print(f"project: {args.files:,} files, built in {time.perf_counter() - t0:.1f} s")
        store = NoteStore(Path(tmp) / "notes", "project", encoder=HashingEncoder())
        t0 = time.perf_counter()
        store.add([Note(f"N{i:04d}", "2026-11-01", "context", note_text(i, args.files), session="bench")
                   for i in range(args.notes)], link_supersession=False)
        print(f"notes:   {args.notes} notes, added in {time.perf_counter() - t0:.1f} s")

        project = Project(root, time.monotonic() + 60)
        t0 = time.perf_counter()
        listed = project._listing()
        t1 = time.perf_counter()
        project.names_env(["NAMED_NOWHERE_X"])
        t2 = time.perf_counter()
        print(f"listing: {len(listed[0]):,} files in {(t1 - t0) * 1000:.0f} ms; "
              f"scan of every file for a variable named nowhere: {(t2 - t1) * 1000:.0f} ms")

        for run in range(args.runs):
            t0 = time.perf_counter()
            report = verify(store, root, today=dt.date(2026, 12, 2))
            ms = (time.perf_counter() - t0) * 1000
            print(f"run {run + 1}: {ms:.0f} ms (budget {VERIFY_SECONDS:.0f} s) - {report.notes} notes, "
                  f"{report.checked} checked, {len(report.failed)} unverified, {report.without_claims} without "
                  f"a claim, revision {report.revision or 'none'}{', OUT OF TIME' if report.timed_out else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
