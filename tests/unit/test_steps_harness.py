"""Durable steps in-process, as an agent author unit-tests a stepped agent: the real worker
over a MemoryBus (``deepagents.testing.AgentHarness``), no Redis. A task that fails
retryably after some steps resumes past them on its next delivery."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import orjson
from pydantic import BaseModel

from deepagents import AgentContract, Result, RetryableError, Task, current_context
from deepagents.errors import ErrorCode
from deepagents.modelcall.record import AttemptRecord
from deepagents.modelcall.usage import current_usage
from deepagents.testing import AgentHarness

RUNS: dict[str, list[str]] = {}  # per test agent: the step ids whose fn ran, in order


def _ran(agent: str, what: str) -> str:
    RUNS.setdefault(agent, []).append(what)
    return what


class Notes(BaseModel):
    seen: list[str] = []


class Flaky(AgentContract):
    """Three phases; fails retryably once after its first phase and its lanes, then again
    after a checkpoint: each later delivery must replay, never rerun, what was recorded."""

    name = "flaky"
    version = "1"
    intents = ("flaky",)
    state_model: ClassVar[type[BaseModel] | None] = Notes

    async def execute(self, context: dict[str, Any]) -> Result:
        ctx = context["ctx"]
        assert current_context() is ctx
        attempt = context["task"].payload["fail_at"]
        with ctx.phase("prepare"):
            for i in range(3):  # a loop: the same name three times, prep, prep#2, prep#3
                await ctx.step("prep", self._sync_effect, i)
        with ctx.phase("execute"):
            lanes = await ctx.gather(*(self._lane(ctx, j) for j in range(3)))
        delivery = len(RUNS.setdefault("flaky-deliveries", [])) + 1
        RUNS["flaky-deliveries"].append(str(delivery))
        ctx.state.seen.append(f"d{delivery}")
        if delivery == 1 and attempt >= 1:
            assert not ctx.resumed
            raise RetryableError("first delivery fails after its lanes")
        assert ctx.resumed
        await ctx.checkpoint()
        with ctx.phase("finalize"):
            key = await ctx.step("final", self._key)
        if delivery == 2 and attempt >= 2:
            raise RetryableError("second delivery fails after its checkpoint")
        return Result(output={"lanes": lanes, "key": key, "seen": ctx.state.seen})

    def _sync_effect(self, i: int) -> int:
        _ran(self.name, current_context().step_key)
        return i * 10

    async def _lane(self, ctx: Any, j: int) -> list[Any]:
        a = await ctx.step("fetch", self._async_effect, j)
        b = await ctx.step("fetch", self._async_effect, j + 100)
        return [a, b]

    async def _async_effect(self, n: int) -> dict[str, Any]:
        await asyncio.sleep(0.001 * (3 - n % 3))  # lanes finish out of order
        return {"n": n, "ran": _ran(self.name, current_context().step_key)}

    async def _key(self) -> str:
        return _ran(self.name, current_context().step_key)


async def test_a_retried_task_resumes_past_its_recorded_steps() -> None:
    RUNS.clear()
    async with AgentHarness(Flaky) as h:
        task = Task(intent="flaky", payload={"fail_at": 2})
        result = await h.run(task)
        records = await h.services.bus.load_steps(h.services.keys.shard("flaky", 0), task.task_id)
    assert result.status == "success", result
    assert result.metrics.attempts == 3
    tid = task.task_id
    prep = [f"{tid}/prep", f"{tid}/prep#2", f"{tid}/prep#3"]
    lanes = {f"{tid}/g0.{j}#fetch{n}" for j in range(3) for n in ("", "#2")}
    ran = RUNS["flaky"]
    # Every step ran once over three deliveries: 3 + 6 + 1, none again.
    assert ran[:3] == prep
    assert set(ran[3:9]) == lanes
    assert ran[9:] == [f"{tid}/final"]
    assert result.output is not None
    assert result.output["key"] == f"{tid}/final"
    assert result.output["lanes"][2] == [
        {"n": 2, "ran": f"{tid}/g0.2#fetch"},
        {"n": 102, "ran": f"{tid}/g0.2#fetch#2"},
    ]
    # The first delivery's state was never checkpointed; the second's was, and the third
    # restored it and added its own.
    assert result.output["seen"] == ["d2", "d3"]
    assert orjson.loads(records["state"]) == {"seen": ["d2", "d3"]}
    assert records["state_version"] == b"1"
    assert {name for name in records if name.startswith("step:")} == {
        "step:" + step.split("/", 1)[1] for step in [*prep, *lanes, f"{tid}/final"]
    }


class Priced(AgentContract):
    """One step pays for a model call (as ``wrap_model_call`` records it), then the first
    delivery fails: the second replays the step, and must still count what it cost."""

    name = "priced"
    version = "1"
    intents = ("priced",)

    async def execute(self, context: dict[str, Any]) -> Result:
        ctx = context["ctx"]
        answer = await ctx.step("ask_model", self._call_model)
        delivery = len(RUNS.setdefault("priced-deliveries", [])) + 1
        RUNS["priced-deliveries"].append(str(delivery))
        if delivery == 1:
            raise RetryableError("fails after its paid step")
        return Result(output={"answer": answer})

    def _call_model(self) -> str:
        _ran(self.name, current_context().step_key)
        ledger = current_usage()
        assert ledger is not None
        paid = AttemptRecord("sim", 1, "ok", "0" * 64, tokens_in=100, tokens_out=20, cost_usd=0.5)
        ledger.add("sim", (paid,), degraded=True)
        return "42"


async def test_a_replayed_step_still_counts_its_model_usage_in_the_result() -> None:
    RUNS.clear()
    async with AgentHarness(Priced) as h:
        result = await h.run(Task(intent="priced"))
    assert result.status == "success", result
    assert result.metrics.attempts == 2
    assert RUNS["priced"] == [f"{result.task_id}/ask_model"]  # the model was paid once
    assert (result.metrics.tokens_used, result.metrics.cost_usd) == (120, 0.5)
    assert result.degraded  # its answer was degraded, though it came from the record


class Big(BaseModel):
    blob: str = ""


class Grows(AgentContract):
    name = "grows"
    version = "1"
    intents = ("grows",)
    state_model: ClassVar[type[BaseModel] | None] = Big

    async def execute(self, context: dict[str, Any]) -> Result:
        ctx = context["ctx"]
        ctx.state.blob = "small"
        await ctx.checkpoint()
        ctx.state.blob = "x" * 10_000
        await ctx.checkpoint()
        return Result(output={"unreachable": True})


async def test_a_checkpoint_over_the_limit_fails_the_task_and_keeps_the_last_one() -> None:
    async with AgentHarness(Grows, settings={"max_state_bytes": 1024}) as h:
        task = Task(intent="grows", payload={})
        result = await h.run(task)
        records = await h.services.bus.load_steps(h.services.keys.shard("grows", 0), task.task_id)
    assert result.status == "failed"
    assert result.error is not None and result.error.code == ErrorCode.STATE_TOO_LARGE
    assert "max_state_bytes (1024)" in result.error.message
    assert orjson.loads(records["state"]) == {"blob": "small"}


class Large(AgentContract):
    name = "large"
    version = "1"
    intents = ("large",)

    async def execute(self, context: dict[str, Any]) -> Result:
        ctx = context["ctx"]
        body = await ctx.step("big", lambda: "y" * 5000)
        again = await ctx.step("echo", len, body)
        return Result(output={"len": again})


async def test_a_large_step_result_goes_to_the_claim_store_and_comes_back() -> None:
    async with AgentHarness(Large, settings={"step_inline_bytes": 1024}) as h:
        task = Task(intent="large", payload={})
        result = await h.run(task)
        records = await h.services.bus.load_steps(h.services.keys.shard("large", 0), task.task_id)
        claims = h.services.claims
        assert claims is not None
        ref = records["step:big"]
        assert ref.startswith(b"@mem:")
        assert await claims.get(ref[1:].decode()) == orjson.dumps("y" * 5000)
    assert result.status == "success" and result.output == {"len": 5000}
    assert records["step:echo"] == b"5000"


class NotJson(AgentContract):
    name = "not_json"
    version = "1"
    intents = ("not_json",)

    async def execute(self, context: dict[str, Any]) -> Result:
        await context["ctx"].step("bad", lambda: {1, 2})
        return Result(output={})


async def test_a_step_result_that_is_not_json_fails_the_task_clearly() -> None:
    async with AgentHarness(NotJson) as h:
        result = await h.run(Task(intent="not_json", payload={}))
    assert result.error is not None and result.error.code == ErrorCode.STEP_ERROR
    assert "step 'bad''s result must be JSON" in result.error.message


class Nested(AgentContract):
    name = "nested"
    version = "1"
    intents = ("nested",)

    async def execute(self, context: dict[str, Any]) -> Result:
        ctx = context["ctx"]

        async def outer() -> int:
            return int(await ctx.step("inner", lambda: 1))

        await ctx.step("outer", outer)
        return Result(output={})


async def test_a_step_inside_a_step_is_refused() -> None:
    async with AgentHarness(Nested) as h:
        result = await h.run(Task(intent="nested", payload={}))
    assert result.error is not None and result.error.code == ErrorCode.STEP_ERROR
    assert "steps do not nest" in result.error.message
