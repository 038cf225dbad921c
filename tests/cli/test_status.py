"""Issue 24 item 3: ``deepagents status`` as an SRE reads it, against live workers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.transport.keys import Keys
from tests.cli.support import clean_env, deepagents, table_rows
from tests.support.procs import Procs
from tests.support.wait import eventually

CONFIG = """
defaults: {shards: 2, block_ms: 200, visibility_timeout_ms: 5000}
agents:
  echo: {class: "agents.echo:EchoAgent"}
"""


@pytest.fixture
def env(tmp_path: Path, redis_url: str, prefix: str) -> dict[str, str]:
    path = tmp_path / "deepagents.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return clean_env(
        DEEPAGENTS_REDIS_URL=redis_url,
        DEEPAGENTS_PREFIX=prefix,
        DEEPAGENTS_CONFIG=str(path),
        PYTHONIOENCODING="utf-8",
    )


@pytest.fixture
def procs(env: dict[str, str], client: Redis) -> Iterator[Procs]:
    # After `client`: the workers stop before its teardown deletes the test's keys.
    p = Procs(env)
    try:
        yield p
    finally:
        p.close()


async def _status(env: dict[str, str], *args: str) -> str:
    done = await asyncio.to_thread(deepagents, "status", *args, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def _two_workers(procs: Procs, env: dict[str, str]) -> list[dict[str, Any]]:
    """Two live workers; returns the status rows once every stream counts both."""
    procs.worker("agents.echo:EchoAgent")
    procs.worker("agents.echo:EchoAgent")

    async def both() -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = orjson.loads(await _status(env, "--all", "--json"))
        return rows if all(r["consumers"] == 2 for r in rows) else []

    return await eventually(both, timeout=60, what="every stream counting two consumers")


async def test_consumers_counts_the_live_workers(procs: Procs, env: dict[str, str]) -> None:
    rows = await _two_workers(procs, env)
    assert len(rows) == 6  # 2 shards x 3 tiers, each read by both workers
    plain = table_rows(await _status(env, "--all"), "{echo:")
    assert [cells[3] for cells in plain] == ["2"] * 6


async def test_a_dead_letter_is_counted_once(
    env: dict[str, str], client: Redis, prefix: str
) -> None:
    dlq = Keys(prefix).shard("echo", 0).dlq
    await client.xadd(dlq, {"reason": "decode_error", "error": "test", "deliveries": 1})
    rows = table_rows(await _status(env), "{echo:")
    assert [cells[0] for cells in rows] == [f"{prefix}:{{echo:0}}:{t}" for t in ("p0", "p1", "p2")]
    assert [cells[-1] for cells in rows] == ["1", "", ""]  # the column adds up to one


async def test_an_empty_table_points_at_all(env: dict[str, str]) -> None:
    out = await _status(env)
    assert table_rows(out, "{echo:") == []
    assert "no stream holds a task, a pending entry, a delayed task or a dead letter; --all" in out


async def test_the_plain_view_shows_what_watch_shows(procs: Procs, env: dict[str, str]) -> None:
    await _two_workers(procs, env)
    frame = orjson.loads(await _status(env, "--watch", "--json", "--iterations", "1"))
    assert frame["health"]["echo"]["instances"] == 2
    agents = [r for r in table_rows(await _status(env), "echo") if r[0] == "echo"]
    # agent, instances, healthy, health, circuit (none: not a remote agent), why (nothing)
    assert agents == [["echo", "2", "2", "100%", "-", ""]]
