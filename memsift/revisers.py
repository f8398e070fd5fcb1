"""Reviser backends: who proposes the line operations that tidy a notes file.

`revision` holds the mechanism (operations, validation, audit log, undo); a backend only
proposes. Chosen with `MEMSIFT_REVISER`:

- `embedded` (the default): `revision.propose`, deterministic, no network;
- `claude`: `claude -p` on the user's own Claude Code subscription (`MEMSIFT_CLAUDE_BIN`
  names the binary, default `claude` on PATH);
- `openai`: any OpenAI-compatible `POST {MEMSIFT_REVISER_URL}/chat/completions` (OpenAI,
  vLLM, llama.cpp, Ollama), key from `MEMSIFT_REVISER_KEY` or `OPENAI_API_KEY`;
- `anthropic`: the Messages API, `POST {MEMSIFT_REVISER_URL or ANTHROPIC_BASE_URL or
  https://api.anthropic.com}/v1/messages`, key from `MEMSIFT_REVISER_KEY` or
  `ANTHROPIC_API_KEY`.

`MEMSIFT_REVISER_MODEL` names the model for the last two. An LLM sees the notes file
(secrets masked again) with line numbers, and must answer with a JSON array of operations;
a reply that is not one, or whose operations do not validate, changes nothing, and
`revise_notes` then falls back to the embedded reviser.
"""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from .revision import Op, Revision, parse_ops, propose, revise, snapshot
from .supersession import MIN_COSINE, min_cosine

log = logging.getLogger("memsift")

#: Seconds an LLM reviser may take. Revision runs after capture, in a detached process.
LLM_TIMEOUT_S = 120.0

PROMPT = """You tidy a project's memory file: short notes kept from earlier coding sessions.
Each note is a header line `## <id> · <date> · <kind>[ · session <id>][ · superseded by <id>]`
followed by its text. A note without `session` was written by the user. Below is the file,
each line prefixed with its number and `|`.

Propose edits ONLY as a JSON array of operations, nothing else:
- {{"op": "supersede", "note": "N03", "by": "N07"}}: N07 (newer) replaces what N03 says, for
  example the same fact with a value changed; N03 stays in the file, marked;
- {{"op": "delete", "line": 12, "old": "<exact current text of line 12>"}}: only to remove a
  note with a `session` that repeats another note word for word: delete its header line and
  every line of its text;
- {{"op": "replace", "line": 12, "old": "<exact current text>", "new": "<new text, one line>"}}:
  to tighten a wordy line of a note with a `session` without losing a fact, a reason, a
  number or a name.
Never delete or rewrite a note without `session`, nor the text above the first note: such
edits are refused. Two notes that differ in a value are not duplicates: supersede the older.
Never touch a note that is still true and not repeated. Most files need nothing: then answer [].

{numbered}"""


def numbered(text: str) -> str:
    """`text` with each line prefixed by its 1-based number, as `revision` counts lines."""
    return "\n".join(f"{i}| {line}" for i, line in enumerate(text.removeprefix("\ufeff").splitlines(), 1))


@dataclass
class LLMReviser:
    """A reviser that asks a language model. `complete(prompt) -> reply text` does the call
    and raises on any transport or API error."""

    name: str
    complete: Callable[[str], str]

    def propose(self, text: str, vectors: Mapping[str, np.ndarray] | None = None, cosine: float | None = None) -> list[Op]:
        """The model's operations for `text` (`vectors` and `cosine` are the embedded reviser's). Raises `RevisionError` for a reply that is not a
        list of operations, and whatever `complete` raises."""
        from .secrets import mask

        return parse_ops(self.complete(PROMPT.format(numbered=mask(numbered(text)).text)))


@dataclass
class EmbeddedReviser:
    """The deterministic default (`revision.propose`)."""

    name: str = "embedded"

    def propose(self, text: str, vectors: Mapping[str, np.ndarray] | None = None, cosine: float | None = None) -> list[Op]:
        return propose(text, vectors, MIN_COSINE if cosine is None else cosine)


def claude_cli(binary: str) -> Callable[[str], str]:
    """`complete` through `claude -p` (prompt on stdin, plain text out). Raises
    `RuntimeError` on a non-zero exit, `subprocess.TimeoutExpired` past `LLM_TIMEOUT_S`."""

    def complete(prompt: str) -> str:
        done = subprocess.run([binary, "-p", "--output-format", "text"], input=prompt.encode("utf-8"),
                              capture_output=True, timeout=LLM_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"{binary} -p exited {done.returncode}: {done.stderr.decode('utf-8', 'replace')[:200]}")
        return done.stdout.decode("utf-8", "replace")

    return complete


def openai_chat(url: str, model: str, key: str | None) -> Callable[[str], str]:
    """`complete` through an OpenAI-compatible chat/completions endpoint (temperature 0).
    Raises `httpx.HTTPError` and `KeyError`/`TypeError` for a malformed body."""
    import httpx

    def complete(prompt: str) -> str:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        r = httpx.post(f"{url.rstrip('/')}/chat/completions", headers=headers, timeout=LLM_TIMEOUT_S,
                       json={"model": model, "temperature": 0, "messages": [{"role": "user", "content": prompt}]})
        r.raise_for_status()
        return r.json()["choices"][0]["message"]["content"]

    return complete


def anthropic_messages(url: str, model: str, key: str | None) -> Callable[[str], str]:
    """`complete` through the Anthropic Messages API. Raises `httpx.HTTPError` and
    `KeyError`/`TypeError` for a malformed body."""
    import httpx

    def complete(prompt: str) -> str:
        r = httpx.post(f"{url.rstrip('/')}/v1/messages", timeout=LLM_TIMEOUT_S,
                       headers={"x-api-key": key or "", "anthropic-version": "2023-06-01"},
                       json={"model": model, "max_tokens": 4096, "temperature": 0,
                             "messages": [{"role": "user", "content": prompt}]})
        r.raise_for_status()
        return "".join(b.get("text", "") for b in r.json()["content"] if b.get("type") == "text")

    return complete


def load_reviser(env: Mapping[str, str] | None = None) -> EmbeddedReviser | LLMReviser:
    """The reviser `MEMSIFT_REVISER` names (see the module docstring). Raises `ValueError`
    for an unknown name or a missing URL or model."""
    from .config import environment

    env = environment() if env is None else env
    name = env.get("MEMSIFT_REVISER", "embedded").strip().lower() or "embedded"
    model = env.get("MEMSIFT_REVISER_MODEL", "")
    if name == "embedded":
        return EmbeddedReviser()
    if name == "claude":
        return LLMReviser("claude", claude_cli(env.get("MEMSIFT_CLAUDE_BIN") or "claude"))
    if name in ("openai", "anthropic") and not model:
        raise ValueError(f"MEMSIFT_REVISER={name} needs MEMSIFT_REVISER_MODEL")
    if name == "openai":
        url = env.get("MEMSIFT_REVISER_URL") or ""
        if not url:
            raise ValueError("MEMSIFT_REVISER=openai needs MEMSIFT_REVISER_URL (for example https://api.openai.com/v1)")
        return LLMReviser("openai", openai_chat(url, model, env.get("MEMSIFT_REVISER_KEY") or env.get("OPENAI_API_KEY")))
    if name == "anthropic":
        url = env.get("MEMSIFT_REVISER_URL") or env.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
        return LLMReviser("anthropic", anthropic_messages(url, model, env.get("MEMSIFT_REVISER_KEY") or env.get("ANTHROPIC_API_KEY")))
    raise ValueError(f"MEMSIFT_REVISER={name!r}: use embedded, claude, openai or anthropic")


def revise_notes(store, reviser: EmbeddedReviser | LLMReviser | None = None, *, dry_run: bool = False) -> tuple[list[Op], Revision | None]:
    """Propose operations for the store's notes file and apply them (unless `dry_run`).

    A configured LLM reviser that fails (transport error, a reply that is not a valid set
    of operations) changes nothing and the embedded reviser runs instead; the failure is
    logged. Returns the operations and the applied revision (None when nothing changed).
    Raises `RevisionError` when the file is missing, does not parse, or changed meanwhile.
    """
    reviser = reviser or EmbeddedReviser()
    text, sha = snapshot(store)
    vectors = store.vectors_by_id()
    try:
        ops = reviser.propose(text, vectors, min_cosine(store.encoder.name))
        result = None if dry_run else revise(store, ops, backend=reviser.name, expected_sha=sha)
        return ops, result
    except Exception as exc:
        if isinstance(reviser, EmbeddedReviser):
            raise
        log.warning("reviser %s failed (%s: %s); nothing it proposed was applied, using the embedded reviser",
                    reviser.name, type(exc).__name__, str(exc)[:200])
    return revise_notes(store, EmbeddedReviser(), dry_run=dry_run)
