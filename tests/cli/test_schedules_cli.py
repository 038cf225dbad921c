"""``deepagents schedules list|pause|resume|trigger`` through the real CLI: a pause every
scheduler reads, a trigger with an id of its own, an unknown name in one line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from tests.cli.support import clean_env, deepagents, one_line_error, table_rows

CONFIG = """
agents:
  echo: {class: "agents.echo:EchoAgent"}
schedules:
  nightly: {intent: echo, cron: "0 3 * * *", timezone: Europe/Paris, overlap: buffer_one}
  tick: {intent: echo, every_s: 60, jitter_s: 5}
"""


@pytest.fixture
def env(redis_url: str, prefix: str, client: Redis, tmp_path: Path) -> dict[str, str]:
    # `client` deletes the prefix's keys afterwards
    path = tmp_path / "deepagents.yaml"
    path.write_text(CONFIG)
    return clean_env(
        DEEPAGENTS_REDIS_URL=redis_url, DEEPAGENTS_PREFIX=prefix, DEEPAGENTS_CONFIG=str(path)
    )


async def _cli(env: dict[str, str], *args: str) -> list[dict[str, object]]:
    done = await asyncio.to_thread(deepagents, "schedules", *args, env=env)
    assert done.returncode == 0, done.stderr
    return [orjson.loads(line) for line in done.stdout.splitlines()]


async def test_pause_shows_in_the_list_until_resumed_and_a_trigger_fires_now(
    env: dict[str, str], client: Redis, prefix: str
) -> None:
    assert await _cli(env, "pause", "tick") == [{"schedule": "tick", "paused": True}]
    listed = {row["schedule"]: row for row in await _cli(env, "list")}
    assert listed["tick"]["paused"] is True and listed["nightly"]["paused"] is False
    assert (listed["nightly"]["overlap"], listed["tick"]["jitter_s"]) == ("buffer_one", 5.0)
    assert listed["tick"]["next_slot"] is not None and listed["tick"]["last_slot"] is None
    assert await client.exists(f"{prefix}:schedule:tick:paused") == 1  # shared by leaders
    status = await asyncio.to_thread(deepagents, "status", env=env)
    assert status.returncode == 0, status.stderr
    shown = {cells[0]: cells for cells in table_rows(status.stdout, "") if cells[0]}
    assert shown["tick"][1:3] == ["every 60 s", "paused"]
    assert shown["nightly"][1:3] == ["0 3 * * * Europe/Paris", "-"]
    (resumed,) = await _cli(env, "resume", "tick")
    assert resumed == {"schedule": "tick", "paused": False, "was_paused": True}
    (fired,) = await _cli(env, "trigger", "nightly")
    task_id = str(fired["task_id"])
    assert task_id.startswith("sched.nightly.trigger.")
    location = await client.get(f"{prefix}:loc:{task_id}")
    assert location is not None  # enqueued, as any submit


async def test_an_unknown_schedule_is_one_line(env: dict[str, str], client: Redis) -> None:
    done = await asyncio.to_thread(deepagents, "schedules", "pause", "nope", env=env)
    one_line_error(done, 2, "no schedule 'nope'", "nightly, tick")
