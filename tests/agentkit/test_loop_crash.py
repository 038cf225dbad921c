"""A worker running the loop is killed with ``kill -9`` while a tool call is in flight;
another worker takes the task over. The model turns already answered are replayed from
their step records (the model is not asked again), the completed tool call does not run
again, and only the call in flight repeats. Real Redis, real worker processes, the model
simulator as its own process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus
from deepagents.orchestrator import Orchestrator
from tests.agentkit.agents import GATE_ENV, JOURNAL_ENV
from tests.agentkit.conftest import SimProcess, write_config
from tests.e2e.conftest import registered, worker_procs
from tests.support.procs import Procs
from tests.support.wait import eventually

CONFIG = """
agents:
  crash_loop: {{class: "tests.agentkit.agents:CrashLoopAgent"}}
models:
  chat: {{base_url: "{url}", stream: false, timeouts: {{total_s: 30}}}}
"""
PROMPT = 'sim: call search {"q": "first"}\nsim: then\nsim: call hold {"label": "x"}'


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "tools.log", tmp_path / "gate"


@pytest.fixture
def procs(
    redis_url: str,
    prefix: str,
    tmp_path: Path,
    sim_process: SimProcess,
    files: tuple[Path, Path],
    client: Redis,
) -> Iterator[Procs]:
    config = write_config(tmp_path, CONFIG, url=sim_process.url)
    env = {JOURNAL_ENV: str(files[0]), GATE_ENV: str(files[1])}
    p = worker_procs(redis_url, prefix, config, **env)
    try:
        yield p
    finally:
        p.close()


async def test_a_killed_loop_resumes_without_asking_or_running_again(
    client: Redis,
    prefix: str,
    tmp_path: Path,
    procs: Procs,
    sim_process: SimProcess,
    files: tuple[Path, Path],
) -> None:
    journal, gate = files
    first = procs.worker("tests.agentkit.agents:CrashLoopAgent")
    await registered(client, prefix, "crash_loop", 1)
    config = load_config(tmp_path / "deepagents.yaml")
    settings = Settings(prefix=prefix, outbox=True)
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        handle = await orch.submit({"intent": "crash_loop", "payload": {"prompt": PROMPT}})

        async def holding() -> bool:
            return journal.exists() and "hold-start x" in journal.read_text()

        await eventually(holding, timeout=60, what="the hold tool in flight")
        assert sim_process.stats()["requests"] == 2  # turn 1 (search), turn 2 (hold)
        first.kill()  # SIGKILL: no chance to hand anything back
        first.wait(timeout=10)
        procs.worker("tests.agentkit.agents:CrashLoopAgent")
        gate.touch()
        result = await handle.result(timeout=90)
    assert result.status is ResultStatus.SUCCESS, result.error
    assert result.output["calls"] == 2 and '"held":"x"' in result.output["text"]
    ran = journal.read_text().splitlines()
    assert ran.count("search first") == 1  # the completed call did not run again
    assert ran.count("hold-start x") == 2 and ran.count("hold-end x") == 1  # the one in flight
    # Turns 1 and 2 came back from their step records; only the final answer was asked.
    assert sim_process.stats()["requests"] == 3
