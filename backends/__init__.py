"""Passage backends: where older exchanges are searched when local notes do not answer.

`PassageBackend` is the protocol; `SQLiteBackend` is the embedded implementation (FTS5 and
stored vectors), so the server step runs with no server. Cognee comes behind the same protocol.
"""

from .base import BackendUnavailable, Passage, PassageBackend, SearchResult

__all__ = ["BackendUnavailable", "Passage", "PassageBackend", "SearchResult"]
