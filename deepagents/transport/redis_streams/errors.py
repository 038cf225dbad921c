"""Translate redis-py exceptions into the TransportError family at the layer boundary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis.exceptions as rex

from deepagents.errors import GroupVanished, TransportError

_CLUSTER_MOVES = (rex.AskError, rex.TryAgainError, rex.ClusterDownError)


def translate(exc: rex.RedisError, what: str) -> TransportError:
    text = str(exc)
    if isinstance(exc, rex.ResponseError) and text.startswith("NOGROUP"):
        return GroupVanished(f"{what}: consumer group is gone ({text})")
    if isinstance(exc, rex.ConnectionError | rex.TimeoutError):
        return TransportError(f"{what}: Redis unreachable ({type(exc).__name__}: {text})")
    if isinstance(exc, rex.OutOfMemoryError):
        # A script's first write is refused whole, so nothing was written; it passes once
        # memory is freed (results expire, workers drain) or maxmemory is raised.
        return TransportError(
            f"{what}: Redis is out of memory (maxmemory reached; nothing was written)"
        )
    err = TransportError(f"{what}: {type(exc).__name__}: {text}")
    # A cluster moving slots (MOVED, ASK, TRYAGAIN) or electing a primary (CLUSTERDOWN)
    # answers with errors that a retry a moment later gets past. So does a read blocked on
    # a stream that went away (UNBLOCKED): its slot migrated to another node (the retry is
    # answered MOVED, then served there), or it was deleted (the retry says NOGROUP).
    err.retryable = (
        not isinstance(exc, rex.ResponseError)
        or isinstance(exc, _CLUSTER_MOVES)
        or text.startswith("UNBLOCKED")
    )
    return err


@contextmanager
def redis_errors(what: str) -> Iterator[None]:
    try:
        yield
    except rex.RedisError as exc:
        raise translate(exc, what) from exc
