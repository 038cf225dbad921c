"""``deepagents reply TASK_ID --answer JSON``: answer the question a waiting task asks.

The answer is checked against the question's JSON Schema; a refusal (no such task, not
waiting, answered already, an answer that does not fit) is one line and exit code 1."""

from __future__ import annotations

import argparse
from typing import Any

import orjson

from deepagents.cli.common import load_runtime, redis_client, require_redis_url, run
from deepagents.errors import InvalidPayload
from deepagents.orchestrator import Orchestrator


def register(sub: Any) -> None:
    p = sub.add_parser("reply", help="answer the question a waiting task asks")
    p.add_argument("task_id")
    p.add_argument(
        "--answer", required=True, help="the answer as JSON, e.g. '{\"approved\": true}'"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=main)


def parse_answer(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidPayload(f"--answer is not valid JSON: {exc}") from exc


def main(args: argparse.Namespace) -> int:
    answer = parse_answer(args.answer)
    runtime = load_runtime(args.config)
    url = require_redis_url(runtime.settings)

    async def send() -> int:
        async with (
            redis_client(url, cluster=runtime.settings.redis_cluster) as client,
            Orchestrator.from_client(
                client, config=runtime.config, settings=runtime.settings
            ) as orch,
        ):
            done = await orch.reply(args.task_id, answer)
        if args.json:
            print(
                orjson.dumps(
                    {
                        "task_id": done.task_id,
                        "ask": done.ask,
                        "state": "queued",
                        "waited_s": round(done.waited_s, 3),
                    }
                ).decode()
            )
        else:
            print(
                f"replied to task {done.task_id} (question {done.ask}, asked "
                f"{done.waited_s:.1f} s ago); it is queued again with the answer"
            )
        return 0

    return run(send())
