"""Host hooks: `user-prompt-submit` recalls; `stop`, `pre-compact`, `session-end` and
`session-start` start a capture (Claude Code's events of the same names; Codex has the
first, second and last); `session-start` also adds one line of context when the project
has notes (how many, and that `memsift_search` searches them: `tools.session_line`).

The contract (research note `hosts.md`, sections B2-B5 and F): the host writes one JSON
object on stdin (`session_id`, `transcript_path`, `cwd`, `prompt`, ...); the hook prints
nothing, or `{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
"additionalContext": "..."}}`. Exit 2 would erase the user's prompt, so every path exits 0:
bad input, an empty prompt, a missing model, any exception. The reason goes to
`<memsift home>/logs/hook.log`.

stdin is read as bytes and decoded as UTF-8 (never the locale's code page; a byte order
mark switches to UTF-16 or UTF-32, `decode_stdin`), and stdout is written as ASCII-escaped
JSON bytes, so no console encoding can break either side.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from .config import memsift_home, project_dir, project_root

log = logging.getLogger("memsift")

#: Characters of a prompt that recall reads; a pasted 2 MB image or log gains nothing beyond.
MAX_PROMPT_CHARS = 8000


class HookInputError(ValueError):
    """The host's JSON is missing a field the hook needs, or is not JSON."""


def setup_logging(home: Path, name: str = "hook.log") -> None:
    """Log to `<home>/logs/<name>` (created if needed), never to stdout or stderr."""
    folder = home / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(folder / name, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(message)s"))
    log.handlers[:] = [handler]
    logging.raiseExceptions = False  # a full disk: a log line that cannot be written is dropped, never printed
    log.setLevel(logging.INFO)
    log.propagate = False


def decode_stdin(raw: bytes) -> str:
    """The hook's stdin as text: UTF-8, or UTF-16 / UTF-32 when a byte order mark says so;
    a UTF-8 BOM is dropped (Codex on Windows and some shells write one before the JSON).
    Bytes that do not decode are replaced, never raised on."""
    import codecs

    for bom, codec in ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
                       (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if raw.startswith(bom):  # UTF-32 LE first: its BOM starts with UTF-16 LE's
            return raw.decode(codec, errors="replace")
    return raw.decode("utf-8", errors="replace")


def parse_input(raw: bytes, required: tuple[str, ...] = ("prompt", "cwd")) -> dict[str, Any]:
    """The hook payload as a dict, with the `required` string fields. Raises
    `HookInputError` with the reason."""
    try:
        payload = json.loads(decode_stdin(raw))
    except ValueError as exc:
        raise HookInputError(f"stdin is not JSON ({exc}); {len(raw)} bytes") from None
    if not isinstance(payload, dict):
        raise HookInputError(f"stdin is JSON {type(payload).__name__}, not an object")
    for key in required:
        if not isinstance(payload.get(key), str):
            raise HookInputError(f"field {key!r} missing or not a string")
    if "prompt" in payload and isinstance(payload["prompt"], str):
        # JSON may carry lone surrogates ("\\ud800"), which UTF-8 cannot encode
        payload["prompt"] = payload["prompt"].encode("utf-8", "replace").decode("utf-8")
    if not isinstance(payload.get("transcript_path"), str):
        payload["transcript_path"] = ""
    return payload


def user_prompt_submit(payload: dict[str, Any], home: Path, models: dict | None = None,
                       deferred: list | None = None) -> tuple[str | None, list[str]]:
    """Run recall for one prompt: the additionalContext to inject (or None), and the notices
    owed to the user and the agent (a memory service paused or resumed). `models` caches the
    embedded decision model by encoder setting (a warm server's), None: loaded here. The
    run's record (`runlog`, the hook log's line) is written before returning, or, given a
    `deferred` list, appended to it as a callable for the caller to run once the answer is
    out (the warm server: about 2 ms of each prompt here)."""
    from .config import cognee_config, environment
    from .runlog import paused

    prompt = payload["prompt"][:MAX_PROMPT_CHARS]
    session = str(payload.get("session_id") or "unknown")
    if not prompt.strip():
        log.info("session %s: empty prompt, nothing to do", session)
        return None, []
    if paused(home, session):
        log.info("session %s: memsift is paused (memsift resume), nothing pasted", session)
        return None, []
    root = project_root(payload["cwd"])
    folder = project_dir(root, home)
    env = environment()  # config.toml and the environment, read once per prompt
    cognee = cognee_config(env)
    if cognee is None and not (folder / "notes.md").exists() and not (folder / "passages.sqlite").exists():
        log.info("session %s: no memory yet for %s, nothing to do", session, root)
        return None, []

    from .config import Settings
    from .ledger import Ledger
    from .notes import NoteStore
    from .recall import Recaller, decision_model, passage_backend
    from .transcript import read_transcript

    settings = Settings.from_env(env)
    model = decision_model(home, env, models)
    notes = NoteStore(folder, root.name, encoder=model.encoder)
    backend, breakers, passages_stale = passage_backend(folder, model, home, cognee)
    previous, seen = read_transcript(payload["transcript_path"], settings.context_turns)
    scope = f"{session}:{folder.name}"  # item ids are per project
    try:
        ledger = Ledger(home / "ledger.sqlite")
        seen |= ledger.pasted(scope)
    except sqlite3.Error as exc:  # e.g. a read-only home: recall still works, minus the ledger
        log.warning("ledger unavailable (%s): relying on the transcript alone", exc)
        ledger = None
    try:
        result = Recaller(model, model.encoder, notes, backend, settings).recall(prompt, previous, seen)
        if result.items and ledger is not None:
            try:
                won = ledger.claim(scope, [i.id for i in result.items])
            except sqlite3.Error as exc:
                log.warning("could not record pasted ids in the ledger: %s", exc)
                won = [i.id for i in result.items]
            if len(won) < len(result.items):  # a twin of this hook (fired twice for one prompt) pastes them
                log.info("session %s: %s claimed by a concurrent hook of this session, left out",
                         session, [i.id for i in result.items if i.id not in won])
                result = result.only(won, settings.max_chars)
        notices = breakers.take_notices(session) if breakers is not None else []
    finally:
        if ledger is not None:
            ledger.close()
        if backend is not None:
            backend.close()
    if notes.stale or passages_stale:  # an index lags: rebuilt by a process of its own, never in the prompt
        try:
            command = detach([sys.executable, "-P", "-m", "memsift", "notes", "reindex", "--background",
                              f"--project={root}"], str(root))
            log.info("session %s: an index is stale, started %s", session, " ".join(command[2:]))
        except OSError as exc:  # the paste is ready: it goes out whatever happens here
            log.warning("session %s: an index is stale, could not start a reindex (%s)", session, exc)
    remote = getattr(model, "remote", None)
    usage = "" if remote is None else (f"; decisions {json.dumps(model.events)}, {remote.usage.input_tokens} input "
                                       f"tokens, ${remote.usage.cost_usd:.6f}")

    def record() -> None:
        try:
            from .runlog import RunLog

            runs = RunLog(home / "runs.sqlite")
            runs.record("user-prompt-submit", session, str(root), len(prompt), result.genre,
                        [i.id for i in result.items], len(result.text), result.ms, result.trace, notices)
            runs.close()
        except sqlite3.Error as exc:
            log.warning("could not log the run: %s", exc)
        log.info("session %s: genre %s, pasted %s (%d chars) in %.0f ms; notices %s; trace %s%s",
                 session, result.genre, [i.id for i in result.items], len(result.text), result.ms, notices,
                 json.dumps(result.trace, ensure_ascii=False), usage)

    if deferred is None:
        record()
    else:
        deferred.append(record)
    return "\n".join(notices + ([result.text] if result.text else [])) or None, notices


def session_line(payload: dict[str, Any], home: Path) -> str | None:
    """The session's one line of context about memsift's tools (`tools.session_line`): None
    when the project has no active notes, or memsift is paused for the session."""
    from .runlog import paused
    from .tools import session_line as line

    if not Path(payload["cwd"]).is_dir() or paused(home, str(payload.get("session_id") or "")):
        return None
    return line(project_dir(project_root(payload["cwd"]), home))


#: Capture events: whether the session's last exchange is complete when they fire.
CAPTURE_EVENTS = {"stop": False, "pre-compact": True, "session-end": True, "session-start": True}


def start_capture(payload: dict[str, Any], event: str, home: Path) -> list[str] | None:
    """Hand the capture to a detached process and return at once (SessionEnd gives all its
    hooks 1.5 s); the command started, or None when there is nothing to capture.

    `session-start` sweeps the project's other sessions instead, since `SessionEnd` often
    does not fire. At `stop`, the agent's last message from the payload
    (`last_assistant_message`, which the transcript may not hold yet) is spooled for the
    capture first (`capture.Spool`).
    """
    session = str(payload.get("session_id") or "")
    last = payload.get("last_assistant_message")
    if event == "stop" and session and isinstance(last, str) and last.strip():
        from .capture import Spool

        try:
            Spool(home, session).write(last)
        except OSError as exc:  # the transcript will hold it; the capture goes on
            log.warning("stop: could not spool the last message (%s)", exc)
    transcript = payload["transcript_path"]
    where = payload["cwd"]
    if not Path(where).is_dir():  # deleted since the session started: the transcript still names the project
        if event == "session-start" or not transcript or not Path(transcript).parent.is_dir():
            log.warning("%s: cwd %r is not a folder, nothing to capture", event, payload["cwd"][:200])
            return None
        log.info("%s: cwd %r is not a folder: capturing from the transcript's own", event, payload["cwd"][:200])
        where = str(Path(transcript).parent)
    # -P: the project folder (the cwd) is never on sys.path, so its own `memsift/` cannot shadow
    # ours; `--name=value`: a value starting with "-" stays a value
    command = [sys.executable, "-P", "-m", "memsift", "capture", "--log", f"--cwd={payload['cwd']}"]
    if event == "session-start":
        command += ["--sweep", f"--exclude={session}"]
        if transcript:
            command += [f"--dir={Path(transcript).parent}"]
    elif transcript and session:
        command += [f"--transcript={transcript}", f"--session={session}"] + (["--final"] if CAPTURE_EVENTS[event] else [])
    else:
        log.warning("%s: no transcript_path or session_id in the payload, nothing to capture", event)
        return None
    return detach(command, where)


def detach(command: list[str], cwd: str) -> list[str]:
    """Start `command` in a process of its own, detached from the hook (it outlives it, and
    the host never waits for it), in the folder `cwd`; return the command.

    `cwd` is the project's folder from the payload, never the hook's own: the host may run
    the hook from a folder deleted since, where the child could not even start.
    """
    import os
    import subprocess

    flags = {"start_new_session": True} if os.name != "nt" else {
        "creationflags": subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP}
    subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     close_fds=True, cwd=cwd, **flags)
    return command


def respond(event: str, raw: bytes, home: Path, models: dict | None = None, deferred: list | None = None) -> bytes:
    """What `memsift hook <event>` prints for the host's stdin `raw` (b"" for nothing), the
    work done and logged: a recall, or a detached capture started. Never raises. `models` is
    a warm process's cache of decision models (`memsift.server`), None in a hook process;
    `deferred` as for `user_prompt_submit`."""
    start = time.perf_counter()
    out = b""
    try:
        if event in CAPTURE_EVENTS:
            payload = parse_input(raw, ("cwd",))
            command = start_capture(payload, event, home)
            if command:
                log.info("hook %s: started %s", event, " ".join(command[2:]))
            if event == "session-start" and (line := session_line(payload, home)):
                out = json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": line}},
                                 ensure_ascii=True).encode("ascii")
        elif event == "user-prompt-submit":
            context, notices = user_prompt_submit(parse_input(raw), home, models, deferred)
            if context:
                answer: dict[str, Any] = {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                                                 "additionalContext": context}}
                if notices:  # shown to the user, not to the model
                    answer["systemMessage"] = " ".join(notices)
                out = json.dumps(answer, ensure_ascii=True).encode("ascii")
        else:
            raise HookInputError(f"unknown hook event {event!r}")
    except HookInputError as exc:
        log.warning("bad hook input: %s", exc)
    except Exception as exc:
        log.exception("hook %s failed; nothing pasted", event)
        from .runlog import record_failure

        record_failure(home, event, exc, (time.perf_counter() - start) * 1000)
    log.info("hook %s done in %.0f ms%s", event, (time.perf_counter() - start) * 1000, " (memsift serve)" if models is not None else "")
    return out


def run(event: str, stdin: bytes | None = None, server: str | None = None) -> int:
    """Entry point of `memsift hook <event>` in the hook's own process: always returns 0.
    `server` says why the warm server did not answer, when the thin client tried it first
    (`memsift.client`); it is logged."""
    try:
        home = memsift_home()
    except RuntimeError:  # no HOME and no passwd entry, or MEMSIFT_HOME=~nouser/...: nowhere to keep anything
        return 0
    try:
        setup_logging(home)
    except OSError:
        logging.disable(logging.CRITICAL)  # an unwritable home must not break the agent
    if server:
        log.info("hook %s: in this process (memsift serve: %s)", event, server)
    try:
        raw = sys.stdin.buffer.read() if stdin is None else stdin
    except (OSError, ValueError) as exc:  # a closed or broken stdin
        log.warning("bad hook input: stdin unreadable (%s)", exc)
        return 0
    out = respond(event, raw, home)
    if out:
        try:
            sys.stdout.buffer.write(out)
            sys.stdout.buffer.flush()
        except OSError as exc:  # the host closed the pipe: nothing to do
            log.warning("hook %s: stdout closed (%s)", event, exc)
    if event == "session-start":  # warm the server for the session's prompts
        from .client import start_server

        start_server(home)
    return 0
