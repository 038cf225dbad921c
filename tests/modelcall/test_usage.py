"""The usage scope the runtime reads, and the ResearchAgent calling through wrap_model_call."""

from __future__ import annotations

from agents.research import ResearchAgent
from deepagents.contract.result import Result
from deepagents.contract.task import Task
from deepagents.modelcall import usage_scope, use_model_calls, wrap_model_call
from deepagents.modelcall.simulator import SimulatorThread
from tests.modelcall.conftest import MakeCalls, model_config

TEXT = "Margins rose. Margins fell. Volatility in margins worried the desk about futures."


def _context(task: Task) -> dict[str, object]:
    return {"task": task, "payload": task.payload}


async def test_usage_scope_adds_up_every_call(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    calls = make_calls({"m": model_config(sim.url, price_in_per_1k=1.0, price_out_per_1k=1.0)})
    with usage_scope() as ledger:
        first = await wrap_model_call("m", prompt="one", calls=calls)
        second = await wrap_model_call("m", prompt="two", calls=calls, fallback="x")
    assert ledger.tokens_used == first.tokens_used + second.tokens_used
    assert ledger.cost_usd == round(first.cost_usd + second.cost_usd, 6)
    result = ledger.apply(Result(output="ok"))
    assert (result.metrics.tokens_used, result.metrics.cost_usd) == (
        ledger.tokens_used,
        ledger.cost_usd,
    )
    events = [e.as_object() for e in ledger.audit_events("task-9")]
    assert [e["type"] for e in events] == ["model_call", "model_call"]
    assert {e["task_id"] for e in events} == {"task-9"}
    assert events[0]["outcome"] == "ok" and events[0]["requested_model"] == "m"


async def test_research_agent_uses_the_model(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    calls = make_calls({"research": model_config(sim.url, price_in_per_1k=0.1)})
    task = Task(intent="research", payload={"topic": "margins", "text": TEXT})
    with use_model_calls(calls):
        result = await ResearchAgent().execute(_context(task))
    assert result.output["summary"].startswith("the model")
    assert result.output["model"] == "research" and "margins" in result.output["keywords"]
    assert not result.degraded and result.metrics.tokens_used > 0
    assert result.metrics.cost_usd > 0
    assert sim.log()[0].max_tokens == 256


async def test_research_agent_falls_back_when_the_model_is_down(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    calls = make_calls({"research": model_config(sim.url, retry={"max_retries": 1})})
    sim.call(lambda: sim.sim.configure(error_rate=1.0))
    task = Task(intent="research", payload={"topic": "margins", "text": TEXT})
    result = await ResearchAgent(model_calls=calls).execute(_context(task))
    assert result.degraded and result.output["model"] is None
    assert result.output["summary"].startswith("margins: margins")
    assert len(sim.log()) == 2


async def test_research_agent_offline_without_model_calls() -> None:
    task = Task(intent="research", payload={"topic": "t", "text": TEXT, "simulated_latency_ms": 0})
    result = await ResearchAgent().execute(_context(task))
    assert result.degraded and result.ok and result.output["keywords"][0] == "margins"
