"""Translate redis-py exceptions into the TransportError family at the layer boundary."""

from __future__ import annotations

import re
from types import TracebackType

import redis.exceptions as rex

from deepagents.errors import GroupVanished, TransportError

# Error replies that a retry a moment later gets past. A cluster moving slots (MOVED, ASK,
# TRYAGAIN) or electing a primary (CLUSTERDOWN, MASTERDOWN); a server that is a replica
# until a failover ends (READONLY); one that cannot write its persistence files, a full
# disk (MISCONF), lacks the replicas ``min-replicas-to-write`` asks for (NOREPLICAS), or
# runs a long script (BUSY). And a read blocked on a stream that went away (UNBLOCKED):
# its slot migrated to another node (the retry is answered MOVED, then served there), or
# it was deleted (the retry says NOGROUP).
_PASSING_TYPES = (rex.AskError, rex.TryAgainError, rex.ClusterDownError, rex.ReadOnlyError)
_PASSING_CODES = ("MISCONF", "NOREPLICAS", "BUSY ", "UNBLOCKED")


# redis-py wraps an error reply to a pipelined command in the command's description.
_PIPELINED = re.compile(r"^Command # \d+ \(.*?\) of pipeline caused error: \(?['\"]?", re.S)


def _reply(exc: rex.RedisError) -> str:
    """The server's error reply, unwrapped from redis-py's pipeline annotation."""
    text = str(exc)
    wrapped = _PIPELINED.match(text)
    if wrapped is None:
        return text
    return text[wrapped.end() :].removesuffix("',)").removesuffix('",)')


def translate(exc: rex.RedisError, what: str) -> TransportError:
    text = _reply(exc)
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
    if text.startswith("MISCONF"):
        return TransportError(
            f"{what}: Redis refuses writes: it cannot write its persistence files (is its "
            f"disk full?) ({text})"
        )
    err = TransportError(f"{what}: {type(exc).__name__}: {text}")
    err.retryable = (
        not isinstance(exc, rex.ResponseError)
        or isinstance(exc, _PASSING_TYPES)
        or text.startswith(_PASSING_CODES)
    )
    return err


class redis_errors:  # lower case: used as a function, ``with redis_errors(what):``
    """Raises redis-py's errors as ours, ``what`` saying what was being done. A class,
    not ``@contextmanager``: every Redis call passes here, and a generator's set-up and
    tear-down were 2.3% of a lone submit's instructions (callgrind, in
    ``docs/benchmarks.md``'s submit path)."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, rex.RedisError):
            raise translate(exc, self.what) from exc
        if isinstance(exc, rex.RedisClusterException):
            # redis-py's cluster client when no node it knows answers (not a RedisError):
            # a failover under way, or every node gone.
            raise TransportError(f"{self.what}: Redis Cluster unreachable ({exc})") from exc
