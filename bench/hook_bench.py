"""Benchmark the UserPromptSubmit hook as a whole process, cold (no server) and warm (the thin
client of `memsift serve`), next to the in-process recall time.

Usage: python bench/hook_bench.py [CONVERSATION.json] [--prompts 50]

A temporary MEMSIFT_HOME gets the conversation's notes and passages (through the same
write paths as memsift itself, in a child process so that this one stays small: a forked
child's max RSS counts its parent's pages until it execs); then each of the first N user messages is fed to
the command `memsift install` writes (`install.hook_argv`) in the
project's folder, as Claude Code would (JSON on stdin), one new process per prompt, and timed
from spawn to exit: first with no server (`MEMSIFT_SERVER=off`,
each process loads the model), then with `memsift serve` started and answering (each process is
the standard-library client), each in sessions of their own. Max RSS comes from `os.wait4`. The
warm wall time less the server's own time per prompt (its `hook.log` line) is what the client
process and the socket cost. The same prompts then run through `Recaller.recall` in one warm
process.

This machine's speed varies from run to run by a third (a shared virtual machine): compare
figures of one run, or run it twice.
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


def seed(home: Path, conv: dict, project: Path) -> None:
    from memsift.backends import Passage
    from memsift.backends.sqlite import SQLiteBackend
    from memsift.classifiers.encoders import load_encoder
    from memsift.config import project_dir, project_root
    from memsift.notes import Note, NoteStore

    encoder = load_encoder()
    folder = project_dir(project_root(project), home)
    NoteStore(folder, project.name, encoder=encoder).add(
        [Note(n["id"], n["date"], n["kind"], n["text"]) for n in sorted(conv["notes"], key=lambda n: n["date"])]
    )
    backend = SQLiteBackend(folder / "passages.sqlite", encoder)
    backend.add([Passage(p["id"], p["date"], p["text"]) for p in conv["passages"]])
    backend.close()


def hook_argv() -> list[str]:
    """The prompt hook's process as `memsift install` writes it (`install.hook_argv`), asked
    of a child so that this process stays small."""
    code = "import json; from memsift.install import hook_argv; print(json.dumps(hook_argv('user-prompt-submit')))"
    return json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True).stdout)


def spawn(argv: list[str], payload: bytes, env: dict, cwd: Path) -> tuple[float, int, bytes]:
    """Wall ms, max RSS in KB, stdout of one hook process `argv`, run in `cwd` as the hosts do."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    proc.stdin.write(payload)
    proc.stdin.close()
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    ms = (time.perf_counter() - start) * 1000
    assert proc.returncode == 0
    return ms, usage.ru_maxrss, out


def wait_for_server(home: Path, timeout: float = 60) -> None:
    from memsift.client import ServerUnavailable, ask

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            ask("status", str(home))
            return
        except ServerUnavailable:
            time.sleep(0.1)
    raise SystemExit("memsift serve never answered")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("conversation", nargs="?", default=str(ROOT / "eval" / "conversations" / "en-saas-01.json"))
    parser.add_argument("--prompts", type=int, default=50)
    parser.add_argument("--seed-into", nargs=2, metavar=("HOME", "PROJECT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    conv = json.loads(Path(args.conversation).read_text(encoding="utf-8"))
    if args.seed_into:
        seed(Path(args.seed_into[0]), conv, Path(args.seed_into[1]))
        return
    prompts = [t["user"] for t in conv["turns"]][: args.prompts]
    with tempfile.TemporaryDirectory(prefix="memsift-bench-") as tmp:
        home, project = Path(tmp) / "home", Path(tmp) / conv["id"]
        (project / ".git").mkdir(parents=True)
        os.environ["MEMSIFT_HOME"] = str(home)
        subprocess.run([sys.executable, __file__, args.conversation, "--seed-into", str(home), str(project)], check=True)
        env = {**os.environ, "MEMSIFT_HOME": str(home)}
        argv = hook_argv()
        runs = {}
        for label, server in (("cold (no server)", "off"), ("warm (memsift serve)", "on")):
            mode = {**env, "MEMSIFT_SERVER": server}
            if server == "on":  # start it and wait until it answers, as a SessionStart hook would have
                subprocess.Popen([sys.executable, "-m", "memsift", "serve"], env=mode, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
                wait_for_server(home)
            walls, rss, outs = [], [], []
            for i, prompt in enumerate(prompts):
                payload = json.dumps({"session_id": f"bench-{server}-{i}", "transcript_path": "", "cwd": str(project),
                                      "hook_event_name": "UserPromptSubmit", "prompt": prompt}).encode()
                ms, kb, out = spawn(argv, payload, mode, project)
                walls.append(ms)
                rss.append(kb)
                outs.append(out)
            runs[label] = (walls, rss, outs)
        subprocess.run([sys.executable, "-m", "memsift", "serve", "--stop"], env=env, stdout=subprocess.DEVNULL)
        log = (home / "logs" / "hook.log").read_text(encoding="utf-8")
        served = [float(ms) for ms in re.findall(r"hook user-prompt-submit done in (\d+) ms \(memsift serve\)", log)]

        from memsift.classifiers.embedded import EmbeddedChoiceModel
        from memsift.backends.sqlite import SQLiteBackend
        from memsift.config import project_dir, project_root
        from memsift.notes import NoteStore
        from memsift.recall import Recaller

        model = EmbeddedChoiceModel()
        folder = project_dir(project_root(project), home)
        backend = SQLiteBackend(folder / "passages.sqlite", model.encoder)
        recaller = Recaller(model, model.encoder, NoteStore(folder, project.name, encoder=model.encoder), backend)
        inproc = [recaller.recall(p).ms for p in prompts]
        backend.close()

    import numpy as np  # only now: a big parent would count in its children's max RSS (fork before exec)

    for label, (walls, rss, outs) in runs.items():
        w, r = np.array(walls), np.array(rss) / 1024
        print(f"hook process, {label}, {len(prompts)} prompts ({sum(map(bool, outs))} pasted): wall ms "
              f"p50 {np.percentile(w, 50):.0f} p95 {np.percentile(w, 95):.0f} max {w.max():.0f}; "
              f"max RSS MB p50 {np.percentile(r, 50):.0f} max {r.max():.0f}")
    same = runs["cold (no server)"][2] == runs["warm (memsift serve)"][2]
    print(f"warm answers identical to cold: {same}; answered by the server: {len(served)} of {len(prompts)}")
    if len(served) == len(prompts):  # what the client process and the socket add to the server's own time
        extra = np.array(runs["warm (memsift serve)"][0]) - np.array(served)
        print(f"warm, beyond the server's own time (process start, client, socket): ms p50 "
              f"{np.percentile(extra, 50):.0f} p95 {np.percentile(extra, 95):.0f}")
    q = np.array(inproc)
    print(f"in-process recall (warm): ms p50 {np.percentile(q, 50):.1f} p95 {np.percentile(q, 95):.1f} max {q.max():.1f}")


if __name__ == "__main__":
    main()
