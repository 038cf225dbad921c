"""A no-op task on arq (its Redis sorted-set queue), for bench_startup_peers.py."""

import os

from arq.connections import RedisSettings
from stamp import record


async def noop(ctx: dict, i: int, t: int = 0) -> None:  # type: ignore[type-arg]
    record(t)


class WorkerSettings:
    functions = [noop]
    redis_settings = RedisSettings.from_dsn(os.environ["PEER_REDIS_URL"])
