"""A process that takes the fleet's credential-refresh lock and hangs in the fetch, for
the test that kills it with ``-9`` there (RELIABILITY row 39).

    python -m tests.modelcall.proc_stuck_refresher REDIS_URL PREFIX MODEL LOCK_TTL_S

Once it holds the lock it sets ``<PREFIX>:test:fetching`` and waits forever."""

from __future__ import annotations

import asyncio
import sys

from redis.asyncio import Redis

from deepagents.modelcall.credentials import CredentialStore
from deepagents.store.models.keys import ModelKeys


class _Hangs:
    description = "hangs"

    def __init__(self, client: Redis, marker: str) -> None:
        self.client, self.marker = client, marker

    async def fetch(self) -> str:
        await self.client.set(self.marker, 1, ex=60)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        return None


async def main(url: str, prefix: str, model: str, lock_ttl_s: float) -> None:
    client = Redis.from_url(url)
    source = _Hangs(client, f"{prefix}:test:fetching")
    store = CredentialStore(client, ModelKeys(prefix, model), source, lock_ttl_s=lock_ttl_s)
    await store.refresh(0, timeout_s=3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
