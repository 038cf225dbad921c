"""``deepagents tasks waiting`` and ``deepagents reply`` through the real CLI, against a task
a real worker parked: listed with its question and age, answered once; every refusal is one
clear line (bad JSON, an answer that breaks the schema, answered already, unknown task)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, parse_config
from deepagents.orchestrator import Orchestrator, TaskHandle
from deepagents.worker import Worker
from tests.cli.support import clean_env, deepagents, one_line_error, table_rows
from tests.support.asking import CONFIG, ApprovalAgent
from tests.support.wait import eventually
from tests.support.workers import running


@pytest.fixture
def env(redis_url: str, prefix: str, tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "deepagents.yaml"
    config.write_text(CONFIG)
    return clean_env(
        DEEPAGENTS_REDIS_URL=redis_url, DEEPAGENTS_PREFIX=prefix, DEEPAGENTS_CONFIG=str(config)
    )


def _worker(client: Redis, settings: Settings) -> Worker:
    config = parse_config(CONFIG)
    return Worker.from_client(ApprovalAgent(), client=client, config=config, settings=settings)


@pytest.fixture
async def waiting_task(
    client: Redis, settings: Settings, tmp_path: Path
) -> AsyncIterator[tuple[Orchestrator, TaskHandle]]:
    """A task a worker parked; the worker is stopped then, so a task a reply queues again
    stays queued until the test runs a worker (``_worker``)."""
    config = parse_config(CONFIG)
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        async with running(_worker(client, settings)):
            payload = {"item": "the budget", "runs": str(tmp_path / "runs")}
            handle = await orch.submit({"intent": "approve", "payload": payload})

            async def parked() -> bool:
                return await orch.task_state(handle.task_id) == "waiting"

            await eventually(parked, timeout=30, what="the task waits")
        yield orch, handle


async def _cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    done = await asyncio.to_thread(deepagents, *args, env=env)
    return done.returncode, done.stdout, done.stderr


async def test_the_open_question_is_listed_and_answered_once(
    env: dict[str, str],
    waiting_task: tuple[Orchestrator, TaskHandle],
    client: Redis,
    settings: Settings,
) -> None:
    """The second reply comes while the first one's entry is queued, no worker running to
    take it: the reply itself is refused, not a later check of a running or done task."""
    orch, handle = waiting_task
    code, out, _ = await _cli("tasks", "waiting", env=env)
    assert code == 0
    (row,) = table_rows(out, handle.task_id[:8])
    assert "approve the budget?" in row and row[-1] == "fail"
    code, out, _ = await _cli("tasks", "waiting", "--json", env=env)
    (listed,) = orjson.loads(out)
    assert listed["task_id"] == handle.task_id and listed["age_s"] >= 0
    code, out, err = await _cli("reply", handle.task_id, "--answer", '{"approved": true}', env=env)
    assert code == 0, err
    assert "queued again" in out
    assert await orch.task_state(handle.task_id) == "queued"
    second = await asyncio.to_thread(
        deepagents, "reply", handle.task_id, "--answer", '{"approved": false}', env=env
    )
    one_line_error(second, 1, "answered already")
    assert await orch.task_state(handle.task_id) == "queued"
    async with running(_worker(client, settings)):
        result = await handle.result(timeout=30)
    assert result.output == {"approved": True, "note": ""}
    done = await asyncio.to_thread(
        deepagents, "reply", handle.task_id, "--answer", '{"approved": false}', env=env
    )
    one_line_error(done, 1, "answered already")
    code, out, _ = await _cli("tasks", "waiting", env=env)
    assert "no task is waiting" in out


async def test_every_refusal_is_one_line(
    env: dict[str, str], waiting_task: tuple[Orchestrator, TaskHandle]
) -> None:
    orch, handle = waiting_task
    bad = await asyncio.to_thread(deepagents, "reply", handle.task_id, "--answer", "{", env=env)
    one_line_error(bad, 1, "--answer is not valid JSON")
    wrong = await asyncio.to_thread(
        deepagents, "reply", handle.task_id, "--answer", '{"approved": "maybe"}', env=env
    )
    one_line_error(wrong, 1, "approved", "is not of type 'boolean'")
    unknown = await asyncio.to_thread(
        deepagents, "reply", "no-such-task", "--answer", "{}", env=env
    )
    one_line_error(unknown, 1, "no task no-such-task")
    assert await orch.task_state(handle.task_id) == "waiting"  # nothing was applied
