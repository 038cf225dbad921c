"""Whole-deployment housekeeping: every key under a prefix."""

from __future__ import annotations

from redis.asyncio import Redis

# Keys deleted per DEL: large enough to be cheap, small enough not to block the server.
_CHUNK = 500


async def drop_prefix(client: Redis, prefix: str) -> int:
    """Delete every key of the deployment ``prefix`` (the demo's throwaway one); returns
    how many. SCAN visits each node on a cluster client."""
    keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
    for i in range(0, len(keys), _CHUNK):
        await client.delete(*keys[i : i + _CHUNK])
    return len(keys)
