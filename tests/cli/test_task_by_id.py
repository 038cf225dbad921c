"""``deepagents result``, ``deepagents tasks show`` and ``deepagents tasks watch`` through the
real CLI, against a task a real worker ran (audit outbox on): the Result by id, the record,
the events in order (and resumed after one); every refusal is one clear line."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from agents.echo import EchoAgent
from deepagents.config import Settings, parse_config
from deepagents.orchestrator import Orchestrator, TaskHandle
from deepagents.worker import Worker
from tests.cli.support import clean_env, deepagents, one_line_error, table_rows
from tests.support.asking import CONFIG
from tests.support.workers import running


@pytest.fixture
def env(redis_url: str, prefix: str, tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "deepagents.yaml"
    config.write_text(CONFIG)
    return clean_env(
        DEEPAGENTS_REDIS_URL=redis_url, DEEPAGENTS_PREFIX=prefix, DEEPAGENTS_CONFIG=str(config)
    )


@pytest.fixture
async def orch(client: Redis, settings: Settings) -> AsyncIterator[Orchestrator]:
    async with Orchestrator.from_client(
        client, config=parse_config(CONFIG), settings=settings
    ) as orchestrator:
        yield orchestrator


@pytest.fixture
async def finished(client: Redis, settings: Settings, orch: Orchestrator) -> TaskHandle:
    worker = Worker.from_client(
        EchoAgent(), client=client, config=parse_config(CONFIG), settings=settings
    )
    async with running(worker):
        handle = await orch.submit({"intent": "echo", "payload": {"text": "hello"}})
        await handle.result(timeout=30)
    return handle


async def _cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    done = await asyncio.to_thread(deepagents, *args, env=env)
    return done.returncode, done.stdout, done.stderr


async def test_result_and_record_by_id(
    env: dict[str, str], finished: TaskHandle, orch: Orchestrator
) -> None:
    task_id = finished.task_id
    code, out, err = await _cli("result", task_id, env=env)
    assert code == 0, err
    result = orjson.loads(out)
    assert result["task_id"] == task_id and result["status"] == "success"
    stored = await orch.get_result(task_id)
    assert stored is not None and result == stored.model_dump(mode="json")
    code, out, err = await _cli("tasks", "show", task_id, "--json", env=env)
    assert code == 0, err
    shown = orjson.loads(out)
    assert shown["state"] == "done" and shown["agent"] == "echo"
    assert shown["result"] == result
    code, out, err = await _cli("tasks", "show", task_id, env=env)
    assert code == 0, err
    assert table_rows(out, "state") and "done" in out


async def test_watch_prints_the_events_in_order_and_resumes_after_one(
    env: dict[str, str], finished: TaskHandle
) -> None:
    code, out, err = await _cli("tasks", "watch", finished.task_id, "--json", env=env)
    assert code == 0, err
    events = [orjson.loads(line) for line in out.splitlines()]
    assert [e["type"] for e in events] == ["submitted", "started", "succeeded"]
    ids = [e["event_id"] for e in events]
    assert ids == sorted(ids) and all(e["task_id"] == finished.task_id for e in events)
    code, out, err = await _cli(
        "tasks", "watch", finished.task_id, "--after", ids[0], "--json", env=env
    )
    assert code == 0, err
    assert [orjson.loads(line)["event_id"] for line in out.splitlines()] == ids[1:]
    code, out, err = await _cli("tasks", "watch", finished.task_id, env=env)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3 and "succeeded" in lines[-1] and "status=success" in lines[-1]


async def test_every_refusal_is_one_line(env: dict[str, str], orch: Orchestrator) -> None:
    queued = await orch.submit({"intent": "echo", "payload": {}})  # no worker runs
    not_yet = await asyncio.to_thread(deepagents, "result", queued.task_id, env=env)
    one_line_error(not_yet, 1, f"task {queued.task_id} is queued", "no result yet")
    for args in (
        ("result", "no-such-task"),
        ("tasks", "show", "no-such-task"),
        ("tasks", "watch", "no-such-task"),
    ):
        done = await asyncio.to_thread(deepagents, *args, env=env)
        one_line_error(done, 1, "no task no-such-task")
    for args in (("result", "a/b"), ("tasks", "show", "a" * 65), ("tasks", "watch", "x y")):
        done = await asyncio.to_thread(deepagents, *args, env=env)
        one_line_error(done, 1, "is not a task id")
    bad_after = await asyncio.to_thread(
        deepagents, "tasks", "watch", queued.task_id, "--after", "yesterday", env=env
    )
    one_line_error(bad_after, 1, "--after 'yesterday' is not an event id")
    bad_wait = await asyncio.to_thread(
        deepagents, "result", queued.task_id, "--wait", "-1", env=env
    )
    one_line_error(bad_wait, 2, "--wait must be between 0 and 86400")
