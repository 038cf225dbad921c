"""``deepagents tasks show TASK_ID``: one task's record in Redis (state, agent, tier, shard,
attempt, the question it waits on, its result; for a task that delegated, each child with
its state; for a child, its ``parent_id``)."""

from __future__ import annotations

import argparse
from typing import Any

import orjson
from rich.table import Table

from deepagents.cli.common import console, load_runtime, redis_client, require_redis_url, run
from deepagents.cli.task_lookup import checked_task_id, task_record
from deepagents.contract.codec import decode_result
from deepagents.orchestrator import Orchestrator
from deepagents.orchestrator.children import children_of

# Fields of the task hash not worth a line of their own (the result is shown decoded).
_HIDDEN = frozenset({"result", "task", "payload"})


def view(task_id: str, info: dict[str, Any]) -> dict[str, Any]:
    """The record as plain JSON: text fields, and the result decoded."""
    out: dict[str, Any] = {"task_id": task_id}
    for key, value in sorted(info.items()):
        if key in _HIDDEN:
            continue
        out[key] = value.decode(errors="replace") if isinstance(value, bytes) else value
    if info.get("result"):
        out["result"] = decode_result(info["result"]).model_dump(mode="json")
    return out


def main(args: argparse.Namespace) -> int:
    task_id = checked_task_id(args.task_id)
    runtime = load_runtime(args.config)
    url = require_redis_url(runtime.settings)

    async def read() -> dict[str, Any]:
        async with (
            redis_client(url, cluster=runtime.settings.redis_cluster) as client,
            Orchestrator.from_client(
                client, config=runtime.config, settings=runtime.settings
            ) as orch,
        ):
            info = await task_record(orch, task_id)
            shown = view(task_id, info)
            kids = children_of(info)
            if kids:  # ctx.delegate: each child with its state now
                shown["children"] = [
                    {"task_id": kid, "state": await orch.task_state(kid)} for kid in kids
                ]
            return shown

    shown = run(read())
    if args.json:
        print(orjson.dumps(shown, default=str).decode())
        return 0
    table = Table(title=f"task {task_id}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    for key, value in shown.items():
        text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
        table.add_row(key, text)
    console().print(table)
    return 0
