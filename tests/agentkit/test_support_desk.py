"""The toolkit's example agent (agents/support_desk.py) as shipped in config/deepagents.yaml:
a real worker process, real Redis, the model simulator as its own process. A refund waits
for a person's approval and runs once approved; one over the desk's limit is approved by a
person and still refused by the guardrail behind the approval."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus
from deepagents.errors import ErrorCode
from deepagents.orchestrator import Orchestrator
from tests.agentkit.conftest import SimProcess
from tests.e2e.conftest import registered, worker_procs
from tests.support.procs import Procs
from tests.support.wait import eventually

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "deepagents.yaml"


def _request(order_id: str, amount: float) -> str:
    """The customer's words, and the simulator's script: look the order up, then ask the
    shipping service (MCP) and refund, two calls in one turn (in parallel)."""
    order = orjson.dumps({"order_id": order_id}).decode()
    refund = orjson.dumps({"order_id": order_id, "amount_eur": amount}).decode()
    return (
        f"Please refund order {order_id}, write to ana.lopez@example.org.\n"
        f"sim: call lookup_order {order}\nsim: then\n"
        f"sim: call shipping_status {order}\nsim: call refund {refund}"
    )


@pytest.fixture
def procs(redis_url: str, prefix: str, client: Redis, sim_process: SimProcess) -> Iterator[Procs]:
    # The shipped config starts the MCP server as "python": this environment's.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    p = worker_procs(
        redis_url, prefix, SHIPPED, DEEPAGENTS_SIM_MODEL_URL=sim_process.url, PATH=path
    )
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
async def orch(client: Redis, prefix: str, procs: Procs) -> AsyncIterator[Orchestrator]:
    procs.worker("agents.support_desk:SupportDeskAgent")
    await registered(client, prefix, "support_desk", 1)
    settings = Settings(prefix=prefix, outbox=True)
    config = load_config(SHIPPED)
    async with Orchestrator.from_client(client, config=config, settings=settings) as made:
        yield made


async def _approved(orch: Orchestrator, request: str) -> dict[str, Any]:
    handle = await orch.submit({"intent": "support", "payload": {"request": request}})

    async def waiting() -> dict[str, Any] | None:
        info = await orch.lookup(handle.task_id)
        return info if info is not None and info.get("state") == "waiting" else None

    info = await eventually(waiting, timeout=60, what="the refund's approval question")
    assert info is not None and "refund" in info["question"]
    await orch.reply(handle.task_id, {"verdict": "approve"})
    result = await handle.result(timeout=60)
    return result.model_dump(mode="json")


async def test_an_approved_refund_runs(orch: Orchestrator) -> None:
    result = await _approved(orch, _request("A-1001", 42))
    assert result["status"] == ResultStatus.SUCCESS, result["error"]
    output = result["output"]
    assert output["stop"] == "final_answer" and output["tool_calls"] == 3
    # The simulator's last answer quotes the results of the last turn's calls.
    assert '"refunded_eur":42' in output["answer"]
    assert '"signed_by":"A. Lopez"' in output["answer"]  # from the MCP server


async def test_a_refund_over_the_limit_is_refused_even_approved(orch: Orchestrator) -> None:
    result = await _approved(orch, _request("A-1002", 780))
    assert result["status"] == ResultStatus.FAILED
    assert result["error"]["code"] == ErrorCode.GUARDRAIL_DENIED
    assert "over what this desk may refund" in result["error"]["message"]
