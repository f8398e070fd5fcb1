"""Push what capture kept to the Cognee server: through the outbox, past the breaker.

`queue` writes documents to the outbox (nothing is sent yet, nothing can be lost);
`flush` sends what is due unless the server's breaker is open, and records the outcome
on the breaker, so that a server that is down is not retried on every capture and its
pause is told to the agent. Neither runs on the prompt hook's path: capture and the
session-start sweep call them from their detached processes, and `memsift sync` by hand.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from .config import CogneeConfig

log = logging.getLogger("memsift")


def queue(home: Path, dataset: str, texts: Sequence[str]) -> int:
    """Add documents to the outbox, secrets masked (`memsift.secrets`); how many were new."""
    from .outbox import Outbox
    from .secrets import mask

    outbox = Outbox(home / "outbox.sqlite")
    try:
        return outbox.put(dataset, [mask(t).text for t in texts])
    finally:
        outbox.close()


def flush(home: Path, config: CogneeConfig) -> tuple[int, str | None]:
    """Send the outbox's due documents to the server, unless its breaker is open.

    Returns (documents confirmed, why nothing or not everything was sent, or None).
    """
    from .backends.cognee import CogneeBackend
    from .breaker import Breakers
    from .outbox import Outbox

    breakers = Breakers(home / "services.sqlite")
    outbox = Outbox(home / "outbox.sqlite")
    try:
        if not outbox.pending():
            return 0, None
        if not breakers.allow("cognee"):
            return 0, f"cognee paused ({breakers.state('cognee').reason})"
        backend = CogneeBackend(config.url, "", None, api_key=config.api_key, jwt=config.jwt)
        sent, error = outbox.flush(backend.push)
        if error is not None:
            breakers.failure("cognee", error)
        elif sent:  # nothing due (all backing off) is no news about the server
            breakers.success("cognee")
        log.info("sync: %d documents confirmed by %s%s", sent, config.url, f"; {error}" if error else "")
        return sent, error
    finally:
        outbox.close()
        breakers.close()
