"""``deepagents result TASK_ID [--wait S]``: a task's Result as JSON, read by id from Redis.

No such task, or no result yet, is one line on stderr and exit code 1."""

from __future__ import annotations

import argparse
from typing import Any

from deepagents.cli.common import load_runtime, redis_client, require_redis_url, run
from deepagents.cli.task_lookup import checked_task_id, task_record
from deepagents.contract.codec import decode_result
from deepagents.contract.result import Result
from deepagents.errors import ConfigError, ResultTimeout
from deepagents.orchestrator import Orchestrator, TaskHandle


def register(sub: Any) -> None:
    p = sub.add_parser("result", help="a task's result by id, as JSON")
    p.add_argument("task_id", help="the id submit or publish returned")
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for a task that has not finished (default: do not wait)",
    )
    p.set_defaults(func=main)


async def result_of(orch: Orchestrator, task_id: str, wait_s: float) -> Result:
    info = await task_record(orch, task_id)
    if info.get("result"):
        return decode_result(info["result"])
    if wait_s > 0:
        handle = TaskHandle(
            task_id, info["agent"], info.get("submitted_tier", ""), int(info["shard"]), False, orch
        )
        return await orch.wait_result(handle, wait_s, poll_s=0.1, max_poll_s=1.0)
    raise ResultTimeout(
        f"task {task_id} is {info.get('state')}: no result yet (wait with --wait SECONDS)"
    )


def main(args: argparse.Namespace) -> int:
    task_id = checked_task_id(args.task_id)
    if not 0 <= args.wait <= 86_400:
        raise ConfigError(f"--wait must be between 0 and 86400 seconds, not {args.wait}")
    runtime = load_runtime(args.config)
    url = require_redis_url(runtime.settings)

    async def read() -> Result:
        async with (
            redis_client(url, cluster=runtime.settings.redis_cluster) as client,
            Orchestrator.from_client(
                client, config=runtime.config, settings=runtime.settings
            ) as orch,
        ):
            return await result_of(orch, task_id, args.wait)

    print(run(read()).model_dump_json())
    return 0
