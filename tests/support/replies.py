"""Redis replies as the tests' clients return them, for the type checker.

redis-py types each reply for either ``decode_responses`` setting (``bytes | str``) and
XRANGE as possibly None. The tests' clients never decode and XRANGE answers a list, so
these narrow the types, checked at run time where it is cheap.
"""

from __future__ import annotations

from typing import cast

from redis.asyncio import Redis, RedisCluster
from redis.typing import EncodableT, FieldT

Fields = dict[FieldT, EncodableT]  # what XADD accepts
Entry = tuple[bytes, dict[bytes, bytes]]


def as_bytes(reply: bytes | str | None) -> bytes:
    """A reply that must be there, as the bytes a non-decoding client returns."""
    assert isinstance(reply, bytes), f"expected a bytes reply, got {reply!r}"
    return reply


async def entries(
    client: Redis | RedisCluster, stream: str, count: int | None = None
) -> list[Entry]:
    """The stream's entries, oldest first (XRANGE - +), at most ``count`` of them."""
    found = await client.xrange(stream, count=count)
    assert found is not None
    return cast(list[Entry], found)
