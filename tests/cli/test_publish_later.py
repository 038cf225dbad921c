"""``deepagents publish --not-before/--delay``: a task for later through the real CLI, and
each bad time refused in one line before anything is enqueued."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from tests.cli.support import CONFIG, clean_env, deepagents, one_line_error


@pytest.fixture
def env(redis_url: str, prefix: str, client: Redis) -> dict[str, str]:
    # `client` deletes the prefix's keys afterwards
    return clean_env(
        DEEPAGENTS_REDIS_URL=redis_url, DEEPAGENTS_PREFIX=prefix, DEEPAGENTS_CONFIG=str(CONFIG)
    )


async def _keys(client: Redis, prefix: str) -> list[bytes]:
    return [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]


async def _state(client: Redis, prefix: str, line: dict[str, object]) -> str:
    key = f"{prefix}:{{{line['agent']}:{line['shard']}}}:t:{line['task_id']}"
    state = await client.hget(key, "state")
    return state.decode() if isinstance(state, bytes) else str(state)


@pytest.mark.parametrize("when", ["--delay=3600", "--not-before={soon}"])
async def test_a_task_published_for_later_is_scheduled(
    env: dict[str, str], client: Redis, prefix: str, when: str
) -> None:
    soon = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    args = ("publish", "--intent", "echo", when.format(soon=soon))
    done = await asyncio.to_thread(deepagents, *args, env=env)
    assert done.returncode == 0, done.stderr
    assert await _state(client, prefix, orjson.loads(done.stdout)) == "scheduled"


@pytest.mark.parametrize(
    ("when", "needle", "code"),
    [
        ("--delay=0", "--delay must be a positive number of seconds", 2),
        ("--delay=nan", "--delay must be a positive number of seconds", 2),
        ("--delay=1e300", "past any date", 2),
        ("--not-before=tomorrow", "is not an ISO 8601 time", 2),
        ("--not-before=2030-01-01T00:00:00", "has no zone", 2),
        ("--delay=864000", "DEEPAGENTS_MAX_SCHEDULE_AHEAD_S", 1),
    ],
)
async def test_a_bad_time_is_one_line_and_enqueues_nothing(
    env: dict[str, str], client: Redis, prefix: str, when: str, needle: str, code: int
) -> None:
    done = await asyncio.to_thread(deepagents, "publish", "--intent", "echo", when, env=env)
    one_line_error(done, code, needle)
    assert await _keys(client, prefix) == []


async def test_a_task_published_with_a_fairness_key_and_weight_carries_them(
    env: dict[str, str], client: Redis, prefix: str
) -> None:
    args = ("publish", "--intent", "echo", "--fairness-key", "nightly", "--fairness-weight", "3")
    done = await asyncio.to_thread(deepagents, *args, env=env)
    assert done.returncode == 0, done.stderr
    line = orjson.loads(done.stdout)
    stream = f"{prefix}:{{{line['agent']}:{line['shard']}}}:{line['tier']}"
    entries: Any = await client.xrange(stream)
    ((_, fields),) = entries
    task = orjson.loads(fields[b"task"])
    assert (task["fairness_key"], task["fairness_weight"]) == ("nightly", 3.0)


@pytest.mark.parametrize("weight", ["0", "nan"])
async def test_a_bad_fairness_weight_is_one_line_and_enqueues_nothing(
    env: dict[str, str], client: Redis, prefix: str, weight: str
) -> None:
    args = ("publish", "--intent", "echo", f"--fairness-weight={weight}")
    done = await asyncio.to_thread(deepagents, *args, env=env)
    one_line_error(done, 2, "--fairness-weight must be a positive number")
    assert await _keys(client, prefix) == []
