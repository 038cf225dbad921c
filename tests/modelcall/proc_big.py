"""A fresh process for the response-size tests: ``python -m tests.modelcall.proc_big '<json>'``.

It makes one ordinary call first (the code paths, the pool and the buffers are then warm),
takes its peak RSS as the baseline, makes the call the test aims at an oversized answer,
and prints one JSON line: the outcome and the peak RSS before and after (KiB).
"""

from __future__ import annotations

import asyncio
import gc
import resource
import sys
from typing import Any

import orjson

from deepagents.modelcall import ModelCallError, ModelCalls, ModelConfig, wrap_model_call
from deepagents.transport.redis_streams import connect


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


async def main(spec: dict[str, Any]) -> None:
    redis = connect(spec["redis_url"])
    models = {k: ModelConfig.model_validate(v) for k, v in spec["models"].items()}
    outcome: dict[str, Any] = {}
    try:
        async with ModelCalls(models, redis, prefix=spec["prefix"]) as calls:
            await wrap_model_call("warm", prompt="q", calls=calls)
            gc.collect()
            outcome["baseline_kib"] = _peak_kib()
            try:
                await wrap_model_call("big", prompt="q", calls=calls, stream=spec["stream"])
            except ModelCallError as error:
                outcome.update(
                    code=error.code,
                    reason=error.reason,
                    outcomes=[a.outcome for a in error.attempts],
                )
            outcome["peak_kib"] = _peak_kib()
    finally:
        await redis.aclose()
    sys.stdout.write(orjson.dumps(outcome).decode() + "\n")


if __name__ == "__main__":
    asyncio.run(main(orjson.loads(sys.argv[1])))
