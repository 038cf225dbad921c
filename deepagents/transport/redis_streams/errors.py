"""Translate redis-py exceptions into the TransportError family at the layer boundary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis.exceptions as rex

from deepagents.errors import GroupVanished, TransportError


def translate(exc: rex.RedisError, what: str) -> TransportError:
    text = str(exc)
    if isinstance(exc, rex.ResponseError) and text.startswith("NOGROUP"):
        return GroupVanished(f"{what}: consumer group is gone ({text})")
    if isinstance(exc, rex.ConnectionError | rex.TimeoutError):
        return TransportError(f"{what}: Redis unreachable ({type(exc).__name__}: {text})")
    err = TransportError(f"{what}: {type(exc).__name__}: {text}")
    err.retryable = not isinstance(exc, rex.ResponseError)
    return err


@contextmanager
def redis_errors(what: str) -> Iterator[None]:
    try:
        yield
    except rex.RedisError as exc:
        raise translate(exc, what) from exc
