"""The guarding built-ins end to end: real Redis, a real worker process per agent, the model
simulator as its own process (scripted by ``sim:`` directives to ask for tools), and Python
tools that journal every run to a file.

- the guardrail's deny rule, and an exception inside its policy, both end the task
  ``guardrail_denied`` and the tool never runs; with ``on_deny: tell_model`` the refusal
  goes back to the model instead;
- loop detection stops an agent that asks for the same call forever;
- limits end the task ``limit_exceeded`` before the call over the limit runs;
- approval: a destructive tool waits for a person; approve runs it once, reject never,
  edit runs it with the edited arguments.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus
from deepagents.errors import ErrorCode, InvalidReply
from deepagents.orchestrator import Orchestrator
from tests.agentkit.agents import JOURNAL_ENV
from tests.agentkit.conftest import SimProcess, write_config
from tests.e2e.conftest import registered, worker_procs
from tests.support.procs import Procs
from tests.support.wait import eventually

MODULE = "tests.agentkit.agents"
CONFIG = """
agents:
  guarded:
    class: "{module}:ToolAgent"
    middleware:
      - {{name: guardrail, deny: [{{tool: wipe}}]}}
  guard_broken:
    class: "{module}:BrokenGuardAgent"
    middleware:
      - {{name: guardrail, policy: "{module}:broken_policy"}}
  guard_tell:
    class: "{module}:TellingGuardAgent"
    middleware:
      - {{name: guardrail, deny: [{{tool: wipe, arguments: {{target: "prod*"}}}}],
          on_deny: tell_model}}
  looping:
    class: "{module}:LoopingAgent"
    middleware:
      - {{name: loop_detection, repeats: 3}}
  limited:
    class: "{module}:LimitedAgent"
    middleware:
      - {{name: limits, tool_calls: 2}}
  approving:
    class: "{module}:ApprovingAgent"
    middleware:
      - {{name: approval, timeout_s: 600}}
      - {{name: guardrail, deny: [{{tool: wipe, arguments: {{target: "prod*"}}}}]}}
models:
  chat:
    base_url: "{url}"
    stream: false
    timeouts: {{total_s: 30}}
"""
CLASSES = {
    "guarded": "ToolAgent",
    "guard_broken": "BrokenGuardAgent",
    "guard_tell": "TellingGuardAgent",
    "looping": "LoopingAgent",
    "limited": "LimitedAgent",
    "approving": "ApprovingAgent",
}


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    return tmp_path / "tools.log"


@pytest.fixture
def config_path(tmp_path: Path, sim_process: SimProcess) -> Path:
    return write_config(tmp_path, CONFIG, url=sim_process.url, module=MODULE)


@pytest.fixture
def procs(
    redis_url: str, prefix: str, config_path: Path, journal_path: Path, client: Redis
) -> Iterator[Procs]:
    p = worker_procs(redis_url, prefix, config_path, **{JOURNAL_ENV: str(journal_path)})
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
async def orch(client: Redis, prefix: str, config_path: Path) -> AsyncIterator[Orchestrator]:
    settings = Settings(prefix=prefix, outbox=True)
    config = load_config(config_path)
    async with Orchestrator.from_client(client, config=config, settings=settings) as made:
        yield made


async def _start(procs: Procs, client: Redis, prefix: str, agent: str) -> None:
    procs.worker(f"{MODULE}:{CLASSES[agent]}")
    await registered(client, prefix, agent, 1)


async def _run(orch: Orchestrator, agent: str, prompt: str) -> dict[str, Any]:
    handle = await orch.submit({"intent": agent, "payload": {"prompt": prompt}})
    result = await handle.result(timeout=60)
    return result.model_dump(mode="json")


def _ran(journal_path: Path) -> list[str]:
    return journal_path.read_text().splitlines() if journal_path.exists() else []


WIPE_DB = 'sim: call wipe {"target": "db"}'


async def test_a_denied_tool_ends_the_task_guardrail_denied(
    client: Redis, prefix: str, procs: Procs, orch: Orchestrator, journal_path: Path
) -> None:
    await _start(procs, client, prefix, "guarded")
    result = await _run(orch, "guarded", f'sim: call search {{"q": "db"}}\nsim: then\n{WIPE_DB}')
    assert result["status"] == ResultStatus.FAILED
    assert result["error"]["code"] == ErrorCode.GUARDRAIL_DENIED
    assert "wipe" in result["error"]["message"]
    assert _ran(journal_path) == ["search db"]  # the allowed call ran, the denied one never


async def test_an_exception_inside_the_guardrail_denies(
    client: Redis, prefix: str, procs: Procs, orch: Orchestrator, journal_path: Path
) -> None:
    await _start(procs, client, prefix, "guard_broken")
    result = await _run(orch, "guard_broken", 'sim: call search {"q": "db"}')
    assert result["status"] == ResultStatus.FAILED
    assert result["error"]["code"] == ErrorCode.GUARDRAIL_DENIED
    assert "ConnectionError" in result["error"]["message"]
    assert _ran(journal_path) == []


async def test_tell_model_sends_the_refusal_back_to_the_model(
    client: Redis, prefix: str, procs: Procs, orch: Orchestrator, journal_path: Path
) -> None:
    await _start(procs, client, prefix, "guard_tell")
    prompt = 'sim: call wipe {"target": "prod-db"}\nsim: call wipe {"target": "cache"}'
    result = await _run(orch, "guard_tell", prompt)
    assert result["status"] == ResultStatus.SUCCESS, result["error"]
    # The simulator's final answer quotes the tool results it was given.
    assert "guardrail_denied" in result["output"]["text"]
    assert result["output"]["stop"] == "final_answer"
    assert _ran(journal_path) == ["wipe cache"]


async def test_loop_detection_stops_a_looping_agent(
    client: Redis, prefix: str, procs: Procs, orch: Orchestrator, journal_path: Path
) -> None:
    await _start(procs, client, prefix, "looping")
    result = await _run(orch, "looping", 'sim: call search {"q": "same"}\nsim: repeat')
    assert result["status"] == ResultStatus.FAILED
    assert result["error"]["code"] == ErrorCode.LOOP_DETECTED
    assert _ran(journal_path) == ["search same"] * 2  # the third ask was stopped, not run


async def test_limits_end_the_task_before_the_call_over_the_limit(
    client: Redis, prefix: str, procs: Procs, orch: Orchestrator, journal_path: Path
) -> None:
    await _start(procs, client, prefix, "limited")
    prompt = "\nsim: then\n".join(f'sim: call search {{"q": "{q}"}}' for q in "abc")
    result = await _run(orch, "limited", prompt)
    assert result["status"] == ResultStatus.FAILED
    assert result["error"]["code"] == ErrorCode.LIMIT_EXCEEDED
    assert _ran(journal_path) == ["search a", "search b"]


async def _asked(orch: Orchestrator, task_id: str) -> dict[str, Any]:
    async def waiting() -> dict[str, Any] | None:
        info = await orch.lookup(task_id)
        return info if info is not None and info.get("state") == "waiting" else None

    info = await eventually(waiting, timeout=60, what=f"task {task_id} waits for approval")
    assert info is not None
    return info


async def _approval(
    client: Redis, prefix: str, procs: Procs, orch: Orchestrator, reply: dict[str, Any]
) -> dict[str, Any]:
    await _start(procs, client, prefix, "approving")
    prompt = 'sim: call wipe {"target": "cache"}'
    handle = await orch.submit({"intent": "approving", "payload": {"prompt": prompt}})
    info = await _asked(orch, handle.task_id)
    assert "wipe" in info["question"] and '"target":"cache"' in info["question"]
    await orch.reply(handle.task_id, reply)
    result = await handle.result(timeout=60)
    return result.model_dump(mode="json")


async def test_approve_runs_the_destructive_tool_once(
    client: Redis,
    prefix: str,
    procs: Procs,
    orch: Orchestrator,
    journal_path: Path,
    sim_process: SimProcess,
) -> None:
    result = await _approval(client, prefix, procs, orch, {"verdict": "approve"})
    assert result["status"] == ResultStatus.SUCCESS, result["error"]
    assert _ran(journal_path) == ["wipe cache"]
    # The delivery after the reply replayed the first model turn from its step record:
    # two model calls in all (the ask, then the answer to the tool's result), not three.
    assert sim_process.stats()["requests"] == 2


async def test_reject_never_runs_it(
    client: Redis, prefix: str, procs: Procs, orch: Orchestrator, journal_path: Path
) -> None:
    reply = {"verdict": "reject", "reason": "not today"}
    result = await _approval(client, prefix, procs, orch, reply)
    assert result["status"] == ResultStatus.SUCCESS, result["error"]
    assert "not today" in result["output"]["text"]  # the model was told
    assert _ran(journal_path) == []


async def test_edit_runs_it_with_the_edited_arguments(
    client: Redis, prefix: str, procs: Procs, orch: Orchestrator, journal_path: Path
) -> None:
    reply = {"verdict": "edit", "arguments": {"target": "tmp"}}
    result = await _approval(client, prefix, procs, orch, reply)
    assert result["status"] == ResultStatus.SUCCESS, result["error"]
    assert _ran(journal_path) == ["wipe tmp"]


async def test_an_edit_the_guardrail_denies_never_runs(
    client: Redis, prefix: str, procs: Procs, orch: Orchestrator, journal_path: Path
) -> None:
    """approval comes before the guardrail, so edited arguments are checked too."""
    reply = {"verdict": "edit", "arguments": {"target": "prod-db"}}
    result = await _approval(client, prefix, procs, orch, reply)
    assert result["error"]["code"] == ErrorCode.GUARDRAIL_DENIED
    assert _ran(journal_path) == []


async def test_a_reply_outside_the_schema_is_refused(
    client: Redis, prefix: str, procs: Procs, orch: Orchestrator, journal_path: Path
) -> None:
    await _start(procs, client, prefix, "approving")
    handle = await orch.submit(
        {"intent": "approving", "payload": {"prompt": 'sim: call wipe {"target": "x"}'}}
    )
    await _asked(orch, handle.task_id)
    with pytest.raises(InvalidReply):
        await orch.reply(handle.task_id, {"verdict": "edit"})  # edit needs arguments
    await orch.reply(handle.task_id, {"verdict": "approve"})
    result = await handle.result(timeout=60)
    assert result.status is ResultStatus.SUCCESS
    assert _ran(journal_path) == ["wipe x"]
