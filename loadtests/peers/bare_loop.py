"""The floor: a bare redis-py XREADGROUP (COUNT 100, BLOCK) + pipelined XACK loop, no
result, no audit, no ownership check. ``python bare_loop.py`` drains stream ``bare``."""

import asyncio
import json
import os

from redis.asyncio import Redis
from stamp import record

STREAM = GROUP = "bare"


async def main() -> None:
    client = Redis.from_url(os.environ["PEER_REDIS_URL"])
    try:
        await client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    except Exception as exc:  # BUSYGROUP: created by an earlier start
        if "BUSYGROUP" not in str(exc):
            raise
    while True:
        reply = await client.xreadgroup(GROUP, "c1", {STREAM: ">"}, count=100, block=1000)
        if not reply:
            continue
        entries = reply[0][1]
        for _, fields in entries:
            record(json.loads(fields[b"task"]).get("t", 0))
        await client.xack(STREAM, GROUP, *(entry_id for entry_id, _ in entries))


if __name__ == "__main__":
    asyncio.run(main())
