"""Measure `memsift.secrets.mask`: false hits, cases masked, and cost in a fresh process.

Usage: python bench/secrets_bench.py [--module PATH] [--stdlib-bytes 1000000] [--runs 5]

- false hits on prose: every line of tests/data/secrets_innocent_prose.txt (developer
  sentences in en/fr/de/es/zh that use password/secret/key/token/pass innocently) and the
  developer texts of tests/test_secrets.py (`PROSE`); a text counts once per masked span;
- false hits on code: standard-library Python source (json, http, email, logging,
  argparse, urllib, ... of the interpreter running this script), read file by file up to
  about `--stdlib-bytes`; each masked span is printed with its file so it can be judged;
- cases masked: the secrets corpus of tests/test_secrets.py (`CASES` and `SENTENCES`), a case
  counting when its secret is gone from the output;
- cost per call, each text in its own fresh interpreter, import of the module included,
  median of `--runs` (wall and CPU time): short prose without a trigger word, and 5 KB of text with triggers
  (secrets of the corpus and developer prose). Whether detect-secrets was imported is shown.

`--module` loads the masking module from another file (e.g. `git show main:memsift/secrets.py
> /tmp/old_secrets.py`) to get the "before" figures with today's corpus.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STDLIB_PACKAGES = ("json", "http", "email", "logging", "argparse.py", "urllib", "smtplib.py",
                   "ftplib.py", "imaplib.py", "poplib.py", "getpass.py", "netrc.py", "hmac.py",
                   "secrets.py", "hashlib.py", "base64.py", "configparser.py", "ssl.py",
                   "xmlrpc", "tarfile.py", "zipfile", "shutil.py", "subprocess.py", "csv.py",
                   "tokenize.py", "pickle.py", "dataclasses.py", "typing.py", "functools.py",
                   "collections", "asyncio", "unittest", "sqlite3", "importlib", "concurrent", "xml", "multiprocessing",
                   "ctypes", "encodings", "pydoc_data", "idlelib", "lib2to3", "tkinter", "distutils")

CHILD = """
import importlib.util, sys, time
t0, c0 = time.perf_counter(), time.process_time()
spec = importlib.util.spec_from_file_location("memsift_secrets_bench", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
masked = module.mask(sys.argv[2])
t1, c1 = time.perf_counter(), time.process_time()
print(f"{1000 * (t1 - t0):.2f} {1000 * (c1 - c0):.2f} {int('detect_secrets' in sys.modules)} {len(masked.found)}")
"""


def load(path: Path):
    spec = importlib.util.spec_from_file_location("memsift_secrets_bench", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def prose_texts() -> list[str]:
    from tests.test_secrets import PROSE, innocent_prose

    return innocent_prose() + list(PROSE)


def stdlib_files(budget: int) -> list[Path]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    files: list[Path] = []
    total = 0
    for name in STDLIB_PACKAGES:
        path = lib / name
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if "test" in file.parts[len(lib.parts):-1] or not file.exists():
                continue
            files.append(file)
            total += file.stat().st_size
            if total >= budget:
                return files
    return files


def fresh_cost(module_path: Path, text: str, runs: int) -> tuple[float, float, bool, int]:
    """Median wall and CPU ms of import + one call, whether detect-secrets was imported,
    spans masked. CPU time is the steadier figure on a loaded machine."""
    results = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", CHILD, str(module_path), text],
                             capture_output=True, text=True, check=True).stdout.split()
        results.append((float(out[0]), float(out[1]), out[2] == "1", int(out[3])))
    wall = statistics.median(r[0] for r in results)
    cpu = statistics.median(r[1] for r in results)
    return wall, cpu, results[0][2], results[0][3]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--module", type=Path, default=ROOT / "memsift" / "secrets.py")
    parser.add_argument("--stdlib-bytes", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    secrets = load(args.module)
    from tests.test_secrets import CASES, PROSE, SENTENCES, fake_pem

    texts = prose_texts()
    prose_hits = [(text, secrets.mask(text)) for text in texts]
    prose_hits = [(t, m) for t, m in prose_hits if m.found]
    print(f"false hits on prose: {sum(len(m.found) for _, m in prose_hits)} spans in "
          f"{len(prose_hits)} of {len(texts)} texts")
    for text, masked in prose_hits:
        print(f"  {masked.found}: {masked.text[:160]!r}")

    files = stdlib_files(args.stdlib_bytes)
    size = sum(f.stat().st_size for f in files)
    code_hits = []
    for file in files:
        text = file.read_text("utf-8", "replace")
        masked = secrets.mask(text)
        if masked.found:
            code_hits.append((file, masked.found))
    print(f"false hits on stdlib source: {sum(len(f) for _, f in code_hits)} spans in "
          f"{len(files)} files, {size / 1e6:.2f} MB")
    lib = Path(sysconfig.get_paths()["stdlib"])
    for file, found in code_hits:
        print(f"  {file.relative_to(lib)}: {found}")

    cases = list(CASES) + list(SENTENCES)
    missed = [c for c in cases if c.secret in secrets.mask(c.template.format(s=c.secret)).text]
    print(f"cases masked: {len(cases) - len(missed)} of {len(cases)}")
    for case in missed:
        print(f"  missed: {case.id}")

    short = "Can you rename the helper in notes.py and rerun the tests? Thanks."
    dirty = "\n".join(c.template.format(s=c.secret) for c in cases[::4]) + "\n" + fake_pem()[0] + "\n"
    dirty = (dirty + "\n".join(PROSE) * 3)[:5000]
    for name, text in (("short prose", short), ("5 KB with triggers", dirty)):
        wall, cpu, imported, found = fresh_cost(args.module, text, args.runs)
        print(f"cost in a fresh process, {name}: {wall:.0f} ms wall, {cpu:.0f} ms CPU (medians of {args.runs}), "
              f"detect-secrets imported: {imported}, spans masked: {found}")


if __name__ == "__main__":
    main()
