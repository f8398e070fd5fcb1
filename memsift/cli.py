"""The `memsift` command: `hook` (what the hosts run), `capture`, `eval`, `recall`, `notes`,
`install` / `uninstall`, `status`, `log`, `why`, `pause` / `resume`, `doctor`, `sync`, `serve`,
`mcp`.

Heavy modules are imported inside each command, so `memsift hook` starts fast.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import sys
from contextlib import closing
from pathlib import Path


def _hook(args: argparse.Namespace) -> int:
    from .hook import run

    return run(args.event)


def _eval(args: argparse.Namespace) -> int:
    from .eval.replay import ConversationError, run_eval

    if args.report and not Path(args.report).resolve().parent.is_dir():
        print(f"memsift eval: the folder of {args.report} does not exist", file=sys.stderr)
        return 1
    pipelines = ["memsift", "origin"] if args.pipeline == "both" else [args.pipeline]
    replay_file = open(args.replay, "w", encoding="utf-8") if args.replay else None
    try:
        run_eval(args.paths, pipelines, replay_file, sys.stdout, show_details=args.details, backend=args.backend,
                 report=args.report)
    except ConversationError as exc:
        print(f"memsift eval: {exc}", file=sys.stderr)
        return 1
    finally:
        if replay_file is not None:
            replay_file.close()
    return 0


def _capture(args: argparse.Namespace) -> int:
    from .capture import capture, disk_full, sweep
    from .config import memsift_home
    from .hook import setup_logging

    home = memsift_home()
    if args.log:
        setup_logging(home, "capture.log")
    if args.cwd is None:  # the current folder was deleted: a transcript still names its project
        from .transcript import session_cwd

        try:
            args.cwd = session_cwd(args.transcript) if args.transcript and not args.sweep else None
        except OSError:
            args.cwd = None
        if args.cwd is None:
            print("memsift capture: the current folder no longer exists; give --cwd FOLDER", file=sys.stderr)
            return 1
    try:
        if args.sweep:
            results = sweep(args.cwd, home=home, exclude=args.exclude or "", folder=args.dir and Path(args.dir))
        elif args.transcript and args.session:
            results = [capture(args.transcript, args.session, args.cwd, final=args.final, home=home)]
        else:
            print("memsift capture: give --transcript and --session, or --sweep", file=sys.stderr)
            return 2
    except Exception as exc:
        from .runlog import record_failure

        if args.log:  # the hooks' detached runs: the traceback goes to capture.log
            logging.getLogger("memsift").exception("capture failed")
        record_failure(home, "capture", exc, session=args.session or "", project=str(args.cwd))
        if disk_full(exc):
            print(f"memsift capture: the disk holding {home} is full ({exc}); nothing is lost: "
                  "run it again once there is room and it finishes where it stopped", file=sys.stderr)
        else:
            print(f"memsift capture: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    for r in results:
        print(f"{r.session}: "
              + (f"finished the capture cut short (notes {r.finished}); " if r.finished else "")
              + f"{r.exchanges} exchanges read, notes added {r.kept or 'none'}"
              + (f" ({r.skipped})" if r.skipped else ""))
    return 0


def _sync(args: argparse.Namespace) -> int:
    from .config import cognee_config, memsift_home
    from .outbox import Outbox
    from .sync import flush

    config = cognee_config()
    if config is None:
        print("memsift sync: no server configured (set MEMSIFT_COGNEE_URL and MEMSIFT_COGNEE_API_KEY)", file=sys.stderr)
        return 1
    home = memsift_home()
    sent, error = flush(home, config)
    outbox = Outbox(home / "outbox.sqlite")
    left = len(outbox.pending())
    outbox.close()
    print(f"sent {sent}, {left} waiting in the outbox" + (f" ({error})" if error else ""))
    return 1 if error else 0


def _install(args: argparse.Namespace) -> int:
    from .config import memsift_home
    from .install import InstallError, install, uninstall

    try:
        print((install if args.command == "install" else uninstall)(args.host, memsift_home()))
    except InstallError as exc:
        print(f"memsift {args.command}: {exc}", file=sys.stderr)
        return 1
    if args.command == "install":  # the first prompt should not be the one that builds the model
        from .doctor import fine_tuned_check

        print(fine_tuned_check()[1])
    return 0


def _log(args: argparse.Namespace) -> int:
    from .config import memsift_home
    from .runlog import RunLog

    try:  # read only: a read-only or full home reads as well as any
        with closing(RunLog(memsift_home() / "runs.sqlite", readonly=True)) as runs:
            rows = runs.last(args.n)
    except FileNotFoundError:
        rows = []
    if not rows:
        print("no hook runs logged yet")
    for r in rows:
        when = dt.datetime.fromtimestamp(r["at"]).strftime("%m-%d %H:%M:%S")
        label = r["genre"] if r["event"] == "user-prompt-submit" else r["event"]  # a tool call: "mcp memsift_search"
        what = (f"error in {r['event']}: {r['error']}" if r["error"]
                else f"{label or '-':<22} {'pasted' if r['event'] == 'user-prompt-submit' else 'gave'} "
                     f"{','.join(r['pasted'] or []) or '-'}")
        print(f"{r['id']:>5}  {when}  {(r['session'] or '')[:8]:<8}  {what}  {r['ms']:.0f} ms")
    return 0


def _why(args: argparse.Namespace) -> int:
    from .config import memsift_home
    from .runlog import RunLog

    try:
        with closing(RunLog(memsift_home() / "runs.sqlite", readonly=True)) as runs:
            row = runs.get(args.run)
    except FileNotFoundError:
        row = None
    if row is None:
        print(f"memsift why: no run {args.run} (see memsift log)", file=sys.stderr)
        return 1
    print(f"run {row['id']}: {row['event']} in session {row['session']}, project {row['project']}, "
          f"{row['prompt_chars']} characters typed, {row['ms']:.0f} ms")
    for step in row["trace"] or []:
        info = {k: v for k, v in step.items() if k not in ("step", "ms")}
        if "probabilities" in info:
            top = sorted(info.pop("probabilities").items(), key=lambda kv: -kv[1])[:3]
            info["top"] = ", ".join(f"{k} {v:.2f}" for k, v in top)
        print(f"  {step['step']:<9} {step['ms']:>7.1f} ms  " + "; ".join(f"{k}: {v}" for k, v in info.items()))
    print(f"  pasted: {', '.join(row['pasted'] or []) or 'nothing'} ({row['chars']} characters)")
    for notice in row["notices"] or []:
        print(f"  notice: {notice}")
    if row["error"]:
        print(f"  error: {row['error']} (details in logs/{_LOG_FILE.get(row['event'], 'hook.log')})")
    return 0


def _pause(args: argparse.Namespace) -> int:
    from .config import memsift_home
    from .runlog import set_pause

    on = args.command == "pause"
    set_pause(memsift_home(), on, args.session)
    who = f"session {args.session}" if args.session else "every session"
    print(f"memsift {'paused' if on else 'resumed'} for {who}" + (": nothing is pasted until `memsift resume`" if on else ""))
    return 0


#: The log file that holds a failed run's traceback, by event (the hooks log to hook.log).
_LOG_FILE = {"capture": "capture.log"}

#: Commands that work without a current folder (deleted under the shell): they say so
#: (capture takes the project from the transcript).
_CWD_OPTIONAL = {"status", "doctor", "capture"}


def _mcp(args: argparse.Namespace) -> int:
    from .mcpserver import serve

    return serve(args.project)


def _serve(args: argparse.Namespace) -> int:
    from .config import memsift_home
    from .server import serve, stop

    home = memsift_home()
    if args.stop:
        print("memsift serve: stopped" if stop(home) else "memsift serve: none was running")
        return 0
    return serve(home, args.idle)


def _server_line(home) -> str:
    """`status`'s line for the warm server."""
    from .server import status

    got = status(home)
    if got is None:
        return "server     not running (the next prompt starts it)"
    if "error" in got:
        return f"server     not answering: {got['error']}"
    return (f"server     pid {got['pid']}, up {got['uptime_s'] / 60:.0f} min, {got['requests']} requests, "
            f"max RSS {got['max_rss_mb']:.0f} MB")


def _printable(text: str) -> str:
    """`text` for a terminal: its control characters and escape sequences shown as `\\x1b[2J`
    and the like, never run (a note may quote coloured tool output)."""
    from .transcript import CONTROL

    return CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


def _status(args: argparse.Namespace) -> int:
    """Print what can be read of the project's and memsift's state, one line for each part
    that cannot (exit 1 then). Only reads: a read-only or full home shows as well as any."""
    import sqlite3

    from .breaker import Breakers
    from .config import cognee_config, environment, memsift_home, project_dir, project_root, read_state
    from .notes import NoteStore, NotesFormatError
    from .runlog import RunLog, pause_state

    home = memsift_home()
    failed = []

    def cannot(what: str, exc: BaseException) -> None:
        failed.append(what)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"{what:<10} unreadable: {reason}" + (f" ({exc.filename})" if getattr(exc, "filename", None) else ""))

    if args.project is None:
        folder = None
        print("project    none: the current folder no longer exists (give --project FOLDER)")
    else:
        root = project_root(args.project)
        folder = project_dir(root, home)
        print(f"project    {root}\nmemory     {folder}")
        try:
            notes = NoteStore(folder, root.name).read(strict=False)
            active = sum(n.active for n in notes.notes)
            unverified = sum(n.active and n.unverified is not None for n in notes.notes)
            print(f"notes      {active} active, {len(notes.notes) - active} superseded"
                  + (f", {unverified} unverified (memsift notes list)" if unverified else "")
                  + (f"; {len(notes.problems)} problem(s), first {notes.problems[0]} (memsift notes edit)"
                     if notes.problems else ""))
        except (NotesFormatError, OSError) as exc:
            cannot("notes", exc)
    if folder is not None and (folder / "passages.sqlite").exists():
        try:
            with closing(read_state(folder / "passages.sqlite")) as db:
                print(f"passages   {db.execute('SELECT COUNT(*) FROM passages').fetchone()[0]} (local)")
        except (sqlite3.Error, OSError) as exc:
            cannot("passages", exc)
    print(f"paused     {pause_state(home)}")
    print(_server_line(home))
    env = environment()
    cognee = cognee_config(env)
    decision = (env.get("MEMSIFT_DECISION_API") or "").strip() or "embedded"
    print(f"decisions  {decision}")
    print(f"cognee     {cognee.url if cognee else 'not configured'}")
    # a breaker shows only while its service is configured: one left open by a remote model
    # the user has since left is no concern of theirs
    configured = [name for name, on in (("cognee", cognee is not None), ("decision", decision.lower() != "embedded"))
                  if on]
    if configured and (home / "services.sqlite").exists():
        try:
            with closing(Breakers(home / "services.sqlite", readonly=True)) as breakers:
                for service in configured:
                    st = breakers.state(service)
                    if st.state != "closed":
                        print(f"  {service}: {st.state} since {dt.datetime.fromtimestamp(st.since):%Y-%m-%d %H:%M} "
                              f"({st.reason})")
        except (sqlite3.Error, OSError) as exc:
            cannot("breakers", exc)
    if (home / "outbox.sqlite").exists():
        try:
            with closing(read_state(home / "outbox.sqlite")) as db:  # Outbox.pending(), counted without writing
                print(f"outbox     {db.execute('SELECT COUNT(*) FROM outbox').fetchone()[0]} waiting")
        except (sqlite3.Error, OSError) as exc:
            cannot("outbox", exc)
    if (home / "runs.sqlite").exists():
        try:
            with closing(RunLog(home / "runs.sqlite", readonly=True)) as runs:
                for r in runs.errors():
                    when = dt.datetime.fromtimestamp(r["at"]).strftime("%m-%d %H:%M")
                    print(f"error      run {r['id']}, {when}: {r['event']}"
                          + (f" of session {r['session'][:8]}" if r["session"] else "")
                          + f": {r['error']} (logs/{_LOG_FILE.get(r['event'], 'hook.log')})")
        except (sqlite3.Error, OSError) as exc:
            cannot("runs", exc)
    return 1 if failed else 0


def _doctor(args: argparse.Namespace) -> int:
    from .config import project_root
    from .doctor import checks

    results = checks(None if args.project is None else project_root(args.project))
    for ok, message in results:
        print(f"{'ok  ' if ok else 'FIX '} {message}")
    return 0 if all(ok for ok, _ in results) else 1


def _clip(text: str, n: int = 70) -> str:
    """`text` on one line, at most `n` characters, cut with "…"."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def _store(project: str, encoder=None):
    from .config import project_dir, project_root

    if not os.path.isdir(project):
        raise OSError(f"{project} is not a folder")
    from .notes import NoteStore

    root = project_root(project)
    return NoteStore(project_dir(root), root.name, encoder=encoder)


def _notes_add(args: argparse.Namespace) -> int:
    from .notes import Note, NotesFormatError

    store = _store(args.project)
    try:
        (note,) = store.add([Note("", args.date, args.kind, args.text)])
    except (NotesFormatError, ValueError) as exc:
        print(f"memsift notes add: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # the Markdown could not be written: nothing was added
        print(f"memsift notes add: could not write {store.markdown} ({exc}); nothing was added", file=sys.stderr)
        return 1
    print(f"{note.id} · {note.date} · {note.kind}  ({store.markdown})")
    replaced = [old for old in store.notes() if old.superseded_by == note.id]
    for old in replaced:
        print(f"  supersedes {old.id}: {_clip(old.text)}")
    if replaced:
        print("  (kept in the file, never pasted again; `memsift notes undo` takes the link back)")
    for warning in store.warnings:
        print(f"memsift notes add: {warning}", file=sys.stderr)
    return 0


def _notes_list(args: argparse.Namespace) -> int:
    store = _store(args.project)
    parsed = store.read(strict=False)  # as recall reads it: what is wrong is said, the rest listed
    notes = parsed.notes
    for problem in parsed.problems:
        print(f"memsift notes list: {problem}", file=sys.stderr)
    from .recall import instruction_in
    from .transcript import escape_stored

    print(f"# {store.markdown}")
    flagged = 0
    for n in notes:
        status = f" (superseded by {n.superseded_by})" if n.superseded_by else ""
        status += f" (retired {n.retired})" if n.retired else ""
        status += f" (unverified: {n.unverified})" if n.unverified else ""
        finding = instruction_in(n.text)  # the part of the note a paste would read
        forged = escape_stored(n.text) != n.text
        mark = "! " if finding or forged else ""
        print(f"{mark}{n.id} · {n.date} · {n.kind}{status}: {_printable(n.text)}")
        if finding:
            print(f"    ! {finding.reason}; pasted quoted as data")
        if forged:
            print("    ! holds text shaped like memsift's own frame or header (or invisible or control characters); "
                  "pasted escaped")
        flagged += bool(mark)
    if flagged:
        print(f"# {flagged} note(s) marked ! : fix them with `memsift notes edit`")
    return 0


def _notes_show(args: argparse.Namespace) -> int:
    from .notes import NotesFormatError

    store = _store(args.project)
    try:
        notes = {n.id: n for n in store.notes()}
    except NotesFormatError as exc:
        print(f"memsift notes show: {exc}", file=sys.stderr)
        return 1
    if args.id not in notes:
        print(f"memsift notes show: no note {args.id} in {store.markdown}", file=sys.stderr)
        return 1
    n = notes[args.id]
    print(f"{n.id} · {n.date} · {n.kind}" + (f" · session {n.session}" if n.session else "")
          + (f" · superseded by {n.superseded_by} (never pasted)" if n.superseded_by else "")
          + (f" · retired {n.retired} (never searched or pasted)" if n.retired else "")
          + (f" · unverified ({n.unverified})" if n.unverified else ""))
    print(_printable(n.text))
    from .supersession import chain

    links = chain(list(notes.values()), n.id)
    if len(links) > 1:  # oldest first; only the newest active one is ever pasted
        tip = notes.get(links[-1])
        print("chain: " + " -> ".join(links) + (f" (pasted: {links[-1]})" if tip is not None and tip.active else
                                                f" (none pasted: {links[-1]} is {'retired' if tip and tip.retired else 'superseded'};"
                                                " a loop of links? fix the headers with `memsift notes edit`)"))
    for other in notes.values():
        if other.superseded_by == n.id:
            print(f"(supersedes {other.id}: {_clip(other.text)})")
    return 0


def _notes_verify(args: argparse.Namespace) -> int:
    from .revision import RevisionError
    from .verify import verify

    store = _store(args.project)
    if not store.markdown.exists() or not store.notes():
        print(f"no notes to verify in {store.markdown}")
        return 0
    from .config import project_root

    try:
        report = verify(store, project_root(args.project))
    except (OSError, RevisionError) as exc:
        print(f"memsift notes verify: {exc}", file=sys.stderr)
        return 1
    if report.revision:  # the index takes the statuses now rather than on the next prompt
        try:
            store.reindex(wait=0)
        except Exception as exc:  # the next prompt or sweep rebuilds it
            print(f"memsift notes verify: the notes index waits ({exc})", file=sys.stderr)
    for nid, what in report.failed.items():
        print(f"{nid}: unverified ({what})")
    for nid in report.cleared:
        print(f"{nid}: holds again (status cleared)")
    for nid, what in report.dismissed.items():
        print(f"{nid}: {what}, not marked (you undid that status)")
    print(f"{report.notes} active notes: {report.checked} with claims checked, {len(report.failed)} unverified, "
          f"{report.without_claims} without a checkable claim"
          + (", out of time before the rest" if report.timed_out else "")
          + (f"; the file changed as revision {report.revision} (`memsift notes undo` reverts it)" if report.revision else ""))
    return 0


#: Seconds `notes edit` waits for memsift's own write to the notes to end before it gives up.
EDIT_LOCK_WAIT_S = 10.0


def _notes_edit(args: argparse.Namespace) -> int:
    """Open the notes in the editor, holding the notes' write lock while it is open, so that
    no write of memsift's (a capture, the agent's tools) lands under the editor and is lost
    when it saves: they wait, and fail with a clear message past their own wait."""
    import shlex
    import subprocess

    from .notes import NotesFormatError, default_preamble

    store = _store(args.project)
    if not store.markdown.exists():
        store.folder.mkdir(parents=True, exist_ok=True)
        store.markdown.write_text(default_preamble(store.title) + "\n", encoding="utf-8")
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or ("notepad" if os.name == "nt" else "vi")
    from filelock import Timeout

    try:  # memsift's own writers (capture, the agent's memsift_remember and _forget) wait while the editor is open
        with store.lock(timeout=EDIT_LOCK_WAIT_S):
            subprocess.run([*shlex.split(editor), str(store.markdown)])
    except Timeout:
        print(f"memsift notes edit: memsift is writing {store.markdown} right now (a capture, or the agent); "
              "try again in a moment", file=sys.stderr)
        return 1
    try:
        parsed = store.read(strict=True)
    except NotesFormatError as exc:  # the file is the user's: say what to fix, change nothing
        print(f"memsift notes edit: {exc}\nrecall reads the rest; fix that line so that memsift can write the file again",
              file=sys.stderr)
        return 1
    for problem in parsed.problems:  # bytes that are not UTF-8, notes too long: recall copes, the user fixes
        print(f"memsift notes edit: {problem}", file=sys.stderr)
    print(f"{len(parsed.notes)} notes in {store.markdown}")
    return 0


def _notes_undo(args: argparse.Namespace) -> int:
    from .revision import RevisionError, undo

    store = _store(args.project)
    try:
        revision = undo(store, args.revision)
    except RevisionError as exc:
        print(f"memsift notes undo: {exc}", file=sys.stderr)
        return 1
    how = "restored byte for byte" if not revision.ops else f"{len(revision.ops)} lines put back, later changes kept"
    print(f"undid {revision.undoes} ({store.markdown}: {how})")
    return 0


def _notes_history(args: argparse.Namespace) -> int:
    from .revision import history

    store = _store(args.project)
    entries = history(store)
    undone = {e.undoes for e in entries if e.action == "undo"}
    for e in entries:
        what = f"undoes {e.undoes}" if e.action == "undo" else f"{len(e.ops)} operations" + (" (undone)" if e.id in undone else "")
        print(f"{e.id}  {e.time}  {e.action:<6} {e.backend:<10} {what}")
        for op in e.ops if args.ops else ():
            print(f"    {json.dumps(op, ensure_ascii=False)}")
    if not entries:
        print(f"no revisions of {store.markdown} yet")
    return 0


def _notes_reindex(args: argparse.Namespace) -> int:
    import sqlite3

    store = _store(args.project)
    if args.background:  # started by the prompt hook: log to capture.log, and one at a time
        from .config import memsift_home
        from .hook import setup_logging

        setup_logging(memsift_home(), "capture.log")
    for problem in store.read(strict=False).problems:
        print(f"memsift notes reindex: {problem}", file=sys.stderr)
    try:
        embedded = store.reindex(wait=0 if args.background else 600)
    except (OSError, sqlite3.Error) as exc:
        logging.getLogger("memsift").error("notes reindex of %s failed: %s", store.folder, exc)
        print(f"memsift notes reindex: could not write {store.index_path} ({exc})", file=sys.stderr)
        return 1
    if embedded is None:
        print(f"{store.index_path}: another reindex is running and will finish it")
        return 0
    print(f"{store.index_path}: {len(store.notes())} notes indexed, {embedded} embedded now")
    passages = store.folder / "passages.sqlite"
    if passages.exists():  # the local passage tier too: its vectors are the encoder's
        from .backends.sqlite import reembed_passages

        try:
            print(f"{passages}: {reembed_passages(passages, store.encoder)} passages embedded again")
        except sqlite3.Error as exc:
            logging.getLogger("memsift").error("re-embedding the passages of %s failed: %s", store.folder, exc)
            print(f"memsift notes reindex: could not re-embed {passages} ({exc})", file=sys.stderr)
            return 1
    return 0


def _notes_revise(args: argparse.Namespace) -> int:
    from .revisers import load_reviser, revise_notes
    from .revision import RevisionError

    store = _store(args.project)
    try:
        ops, revision = revise_notes(store, load_reviser(), dry_run=args.dry_run)
    except (RevisionError, ValueError) as exc:
        print(f"memsift notes revise: {exc}", file=sys.stderr)
        return 1
    for op in ops:
        print(op)
    if revision is not None:
        print(f"applied as {revision.id} ({store.markdown}); `memsift notes undo` reverts it")
    elif not ops:
        print("nothing to revise")
    return 0


def _recall(args: argparse.Namespace) -> int:
    from .classifiers.embedded import EmbeddedChoiceModel
    from .config import Settings, environment
    from .notes import NotesFormatError
    from .recall import Recaller

    model = EmbeddedChoiceModel()
    store = _store(args.project, model.encoder)
    try:
        result = Recaller(model, model.encoder, store, None, Settings.from_env(environment())).recall(args.message)
    except NotesFormatError as exc:
        print(f"memsift recall: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"genre": result.genre, "pasted": [i.id for i in result.items], "ms": round(result.ms, 1),
                      "trace": result.trace}, ensure_ascii=False, indent=1))
    if result.text:
        print(result.text)
    return 0


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return n


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="memsift", description="Memory for coding agents that decides before it searches.")
    parser.add_argument("--version", action="version", version=f"memsift {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("hook", help="run a host hook: reads the host's JSON on stdin, prints the context to add; always exits 0")
    p.add_argument("event", metavar="EVENT",  # no `choices`: an unknown event is logged and exits 0, as every hook
                   help="the host's hook event: user-prompt-submit, stop, pre-compact, session-end or session-start")
    p.set_defaults(func=_hook)

    p = sub.add_parser("capture", help="keep what a session's transcript holds worth keeping (notes and passages)")
    p.add_argument("--transcript", help="a Claude Code transcript or Codex rollout (JSONL)")
    p.add_argument("--session", help="the session id (capture progress is kept per session)")
    p.add_argument("--cwd", default=None, help="a folder of the project (default: here)")
    p.add_argument("--final", action="store_true", help="the session ended: its last exchange is complete")
    p.add_argument("--sweep", action="store_true", help="capture the project's other sessions that ended uncaptured")
    p.add_argument("--exclude", help="with --sweep: a session to leave alone (the current one)")
    p.add_argument("--dir", help="with --sweep: the host's transcript folder for this project")
    p.add_argument("--log", action="store_true", help="log to <memsift home>/logs/capture.log (the hooks' detached runs)")
    p.set_defaults(func=_capture)

    p = sub.add_parser("eval", help="replay test conversations (memsift-conversation/1 JSON) and print their figures")
    p.add_argument("paths", nargs="+", help="conversation files or folders of them")
    p.add_argument("--replay", metavar="FILE", help="write the per-turn JSONL replay here")
    p.add_argument("--pipeline", choices=["memsift", "origin", "both"], default="both",
                   help="memsift's cascade, the origin baseline (top 5 on every message), or both (default)")
    p.add_argument("--details", action="store_true",
                   help="also print the genre confusion matrix, figures per language and recall outcomes")
    p.add_argument("--report", metavar="FILE.html", help="also write the figures as an HTML page with charts")
    p.add_argument("--backend", choices=["embedded", "cognee"], default="embedded",
                   help="where the passages go: the embedded SQLite store (default) or a new dataset on the "
                        "Cognee server of MEMSIFT_COGNEE_URL")
    p.set_defaults(func=_eval)

    for name, what in (("install", "add memsift's hooks to"), ("uninstall", "remove memsift's hooks from")):
        p = sub.add_parser(name, help=f"{what} the host's user settings (for a pip install; plugin users need not)")
        p.add_argument("host", choices=["claude", "codex"], help="Claude Code (~/.claude/settings.json) or Codex (~/.codex/hooks.json)")
        p.set_defaults(func=_install)

    p = sub.add_parser("status", help="which project, its notes, services and their breakers, the last errors")
    p.add_argument("--project", default=None, help="a folder of the project (default: here)")
    p.set_defaults(func=_status)
    p = sub.add_parser("log", help="the last prompts the hook handled: genre, what was pasted, how long it took")
    p.add_argument("-n", type=_positive, default=20, help="how many (default 20)")
    p.set_defaults(func=_log)
    p = sub.add_parser("why", help="what the cascade decided at each step of one run (a number from memsift log)")
    p.add_argument("run", type=int)
    p.set_defaults(func=_why)
    for name, what in (("pause", "stop pasting"), ("resume", "paste again")):
        p = sub.add_parser(name, help=f"{what}, in every session or one")
        p.add_argument("--session", help="only this session id (default: all)")
        p.set_defaults(func=_pause)

    p = sub.add_parser("serve", help="the warm server that answers the prompt hook (started by the hooks themselves)")
    p.add_argument("--stop", action="store_true", help="stop the running server")
    p.add_argument("--idle", type=float, default=None, help="exit after this many seconds without a request "
                   "(default MEMSIFT_SERVE_IDLE, else 1800)")
    p.set_defaults(func=_serve)

    p = sub.add_parser("mcp", help="the agent's memory tools (memsift_search, _show, _remember, _forget) as a "
                                   "stdio MCP server (started by the host)")
    p.add_argument("--project", default=os.environ.get("CLAUDE_PROJECT_DIR") or None,
                   help="a folder of the project (default: $CLAUDE_PROJECT_DIR, else here)")
    p.set_defaults(func=_mcp)

    p = sub.add_parser("doctor", help="check the hooks, this Python, the services and the host's memory file")
    p.add_argument("--project", default=None, help="a folder of the project (default: here)")
    p.set_defaults(func=_doctor)

    p = sub.add_parser("sync", help="send what waits in the outbox to the Cognee server now")
    p.set_defaults(func=_sync)

    p = sub.add_parser("recall", help="run the cascade on one message and print its trace")
    p.add_argument("message", help="the message, as you would type it to the agent")
    p.add_argument("--project", default=None, help="a folder of the project (default: here)")
    p.set_defaults(func=_recall)

    notes = sub.add_parser("notes", help="the project's local notes").add_subparsers(dest="notes_command", required=True)
    p = notes.add_parser("add", help="add a note (the notes it replaces are marked superseded)")
    p.add_argument("text", help="the note: a choice and its reason, a constraint, an incident and its fix, ...")
    p.add_argument("--kind", required=True, choices=["decision", "constraint", "incident", "convention", "context"],
                   help="what the note records")
    p.add_argument("--date", default=dt.date.today().isoformat(), help="YYYY-MM-DD (default: today)")
    p.add_argument("--project", default=None, help="a folder of the project (default: here)")
    p.set_defaults(func=_notes_add)
    p = notes.add_parser("list", help="print the notes file's path and its notes")
    p.add_argument("--project", default=None, help="a folder of the project (default: here)")
    p.set_defaults(func=_notes_list)
    p = notes.add_parser("show", help="one note, its status and what it supersedes")
    p.add_argument("id", help="a note id, e.g. N012")
    p.add_argument("--project", default=None, help="a folder of the project (default: here)")
    p.set_defaults(func=_notes_show)
    p = notes.add_parser("edit", help="open the notes file in $VISUAL or $EDITOR, then check it")
    p.add_argument("--project", default=None, help="a folder of the project (default: here)")
    p.set_defaults(func=_notes_edit)
    p = notes.add_parser("revise", help="tidy the notes file by line operations (duplicates, superseded notes)")
    p.add_argument("--dry-run", action="store_true", help="print the operations, change nothing")
    p.add_argument("--project", default=None, help="a folder of the project (default: here)")
    p.set_defaults(func=_notes_revise)
    p = notes.add_parser("undo", help="revert a revision of the notes file (default: the last), keeping later changes")
    p.add_argument("revision", nargs="?", help="a revision id from `memsift notes history`, e.g. R0003")
    p.add_argument("--project", default=None, help="a folder of the project (default: here)")
    p.set_defaults(func=_notes_undo)
    p = notes.add_parser("history", help="every revision of the notes file: who proposed it, when, undone or not")
    p.add_argument("--ops", action="store_true", help="also print each revision's line operations")
    p.add_argument("--project", default=None, help="a folder of the project (default: here)")
    p.set_defaults(func=_notes_history)
    p = notes.add_parser("verify", help="check the notes' paths, branches, scripts and variables against the project now")
    p.add_argument("--project", default=None, help="a folder of the project (default: here)")
    p.set_defaults(func=_notes_verify)
    p = notes.add_parser("reindex", help="rebuild the notes index (after an encoder change or a bulk edit)")
    p.add_argument("--background", action="store_true",
                   help="as the prompt hook starts it: log to capture.log, and do nothing if another reindex runs")
    p.add_argument("--project", default=None, help="a folder of the project (default: here)")
    p.set_defaults(func=_notes_reindex)
    return parser


def _command(args: argparse.Namespace) -> str:
    """The command as typed, for messages: `memsift notes add`, `memsift status`."""
    return " ".join(["memsift", args.command] + ([args.notes_command] if getattr(args, "notes_command", None) else []))


class _NoFolder(Exception):
    """The current folder is gone and the command needs one."""


def _folders(args: argparse.Namespace) -> None:
    """`--project` / `--cwd` as absolute paths, the current folder when not given, resolved
    only now and only for the commands that take them. The current folder may have been
    deleted under the shell: `status` and `doctor` then get None and say so; the others
    raise `_NoFolder`."""
    for name in ("project", "cwd"):
        if not hasattr(args, name):
            continue
        value = getattr(args, name)
        try:
            setattr(args, name, os.getcwd() if value is None else os.path.abspath(os.path.expanduser(value)))
        except FileNotFoundError:
            if value is not None or args.command not in _CWD_OPTIONAL:
                raise _NoFolder(name) from None


def main(argv: list[str] | None = None) -> int:
    """`memsift ...`: the command's exit code; an error is one line on stderr, never a traceback
    (a bug still gets one)."""
    args = build_parser().parse_args(argv)
    try:
        _folders(args)
        return args.func(args)
    except _NoFolder as exc:
        print(f"{_command(args)}: the current folder no longer exists; cd to the project or give --{exc} FOLDER",
              file=sys.stderr)
        return 1
    except BrokenPipeError:  # `memsift notes list | head`: the reader has all it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)  # as the Python docs advise (library/signal, note on SIGPIPE)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:  # an unwritable or misplaced MEMSIFT_HOME, a full disk: say so, no traceback
        print(f"{_command(args)}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        import sqlite3

        if not isinstance(exc, sqlite3.Error):
            raise
        print(f"{_command(args)}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
