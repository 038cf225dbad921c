"""A second worker process for fleet tests: ``python -m tests.modelcall.proc_calls '<json>'``.

It builds its own ModelCalls against the shared Redis, says it is ready (INCR ready_key),
waits for the go key, makes ``calls`` concurrent calls and prints one JSON summary line.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import orjson

from deepagents.modelcall import ModelCallError, ModelCalls, ModelConfig, wrap_model_call
from deepagents.transport.redis_streams import connect


async def _one(calls: ModelCalls, spec: dict[str, Any]) -> dict[str, Any]:
    try:
        reply = await wrap_model_call(
            spec["model"], prompt=spec["prompt"], calls=calls, fallback=spec.get("fallback")
        )
    except ModelCallError as exc:
        return {"ok": False, "error": exc.reason, "outcomes": [a.outcome for a in exc.attempts]}
    return {
        "ok": not reply.degraded,
        "model": reply.model,
        "reason": reply.reason,
        "outcomes": [a.outcome for a in reply.attempts],
        "sent": {a.request_id: a.started_at for a in reply.attempts if a.request_id},
    }


async def main(spec: dict[str, Any]) -> None:
    redis = connect(spec["redis_url"])
    models = {k: ModelConfig.model_validate(v) for k, v in spec["models"].items()}
    try:
        async with ModelCalls(models, redis, prefix=spec["prefix"]) as calls:
            await redis.incr(spec["ready_key"])
            give_up = time.monotonic() + 60
            while not await redis.exists(spec["go_key"]):
                if time.monotonic() > give_up:
                    raise SystemExit("no go signal")
                await asyncio.sleep(0.01)
            results = await asyncio.gather(*(_one(calls, spec) for _ in range(spec["calls"])))
            refreshes = sum(
                rt.credentials.refreshes for rt in calls._runtimes.values() if rt.credentials
            )
        sys.stdout.write(orjson.dumps({"results": results, "refreshes": refreshes}).decode())
        sys.stdout.write("\n")
    finally:
        await redis.aclose()


if __name__ == "__main__":
    asyncio.run(main(orjson.loads(sys.argv[1])))
