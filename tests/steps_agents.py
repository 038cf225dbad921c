"""Stepped agents for the durable-steps tests (not shipped in agents/).

``PipelineAgent``: three phases, 20 steps (4 to prepare, 4 lanes of 3, 4 to finalize) and
a checkpoint between execution and finalization. Each step's side effect is one line
appended to the file the payload names: ``<step_key> <pid> <attempt>``, written with
O_APPEND in one write (atomic for a line this short), after the step's sleep, just before
its fn returns — so the only window in which a kill can leave an effect without a record
is the record's own round trip (the in-flight rule)."""

from __future__ import annotations

import asyncio
import os
from typing import Any, ClassVar

from pydantic import BaseModel

from deepagents import AgentContract, Result, RetryableError, current_context
from deepagents.contract.agent import current_attempt

LANES, LANE_STEPS, EDGE_STEPS = 4, 3, 4
STEPS = 2 * EDGE_STEPS + LANES * LANE_STEPS  # 20


class PipelineState(BaseModel):
    done: int = 0
    owner: int = 0


async def effect(path: str, sleep: float, n: int) -> dict[str, int]:
    await asyncio.sleep(sleep)
    line = f"{current_context().step_key} {os.getpid()} {current_attempt.get()}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return {"n": n, "pid": os.getpid()}


class PipelineAgent(AgentContract):
    """Payload: ``effects`` (file), ``sleep`` (s per step); or one of the fence modes
    ``slow_step`` / ``slow_checkpoint`` (s), ``effect_then_sleep`` (s, with ``effects``), or
    ``exit_after_checkpoint`` (v1 only)."""

    name = "pipeline"
    version = "1"
    intents = ("pipeline",)
    state_model: ClassVar[type[BaseModel] | None] = PipelineState
    exits = True  # exit_after_checkpoint applies to this version

    async def execute(self, context: dict[str, Any]) -> Result:
        ctx, payload = context["ctx"], context["payload"]
        if "slow_step" in payload:
            return await self._slow_step(ctx, float(payload["slow_step"]))
        if "slow_checkpoint" in payload:
            return await self._slow_checkpoint(ctx, float(payload["slow_checkpoint"]))
        if "effect_then_sleep" in payload:
            return await self._in_flight(ctx, payload["effects"], payload["effect_then_sleep"])
        path, sleep = payload["effects"], float(payload.get("sleep", 0.0))
        with ctx.phase("prepare"):
            for i in range(EDGE_STEPS):
                await ctx.step("prepare", effect, path, sleep, i)
        with ctx.phase("execute"):
            lanes = await ctx.gather(*(self._lane(ctx, path, sleep, j) for j in range(LANES)))
        self.advance(ctx.state)
        await ctx.checkpoint()
        if payload.get("exit_after_checkpoint") and self.exits:
            os._exit(137)  # dies as the OOM killer would end it, its checkpoint recorded
        with ctx.phase("finalize"):
            for i in range(EDGE_STEPS):
                await ctx.step("finalize", effect, path, sleep, i)
        return Result(output={"lanes": len(lanes), "state": ctx.state.model_dump()})

    def advance(self, state: Any) -> None:
        state.done = EDGE_STEPS + LANES * LANE_STEPS

    async def _lane(self, ctx: Any, path: str, sleep: float, j: int) -> list[int]:
        out = []
        for k in range(LANE_STEPS):
            out.append((await ctx.step("lane", effect, path, sleep, j * 10 + k))["n"])
        return out

    async def _slow_step(self, ctx: Any, seconds: float) -> Result:
        async def slow() -> int:
            await asyncio.sleep(seconds)
            return os.getpid()

        pid = await ctx.step("slow", slow)
        return Result(output={"pid": pid})

    async def _in_flight(self, ctx: Any, path: str, seconds: float) -> Result:
        """A quick step, then one whose effect happens before a long sleep: a kill in that
        sleep leaves the effect without its record (the in-flight window, made wide)."""

        async def effect_then_sleep() -> int:
            await effect(path, 0.0, 1)
            await asyncio.sleep(seconds)
            return os.getpid()

        await ctx.step("quick", effect, path, 0.0, 0)
        pid = await ctx.step("in_flight", effect_then_sleep)
        return Result(output={"pid": pid})

    async def _slow_checkpoint(self, ctx: Any, seconds: float) -> Result:
        await asyncio.sleep(seconds)
        ctx.state.owner = os.getpid()
        await ctx.checkpoint()
        return Result(output={"pid": os.getpid()})


class PipelineStateV2(BaseModel):
    completed: int = 0  # v1's ``done``
    owner: int = 0
    migrated_from: str = ""


class PipelineAgentV2(PipelineAgent):
    """Version 2: its state renames ``done``; ``migrate_state`` turns a v1 checkpoint into it."""

    version = "2"
    state_model: ClassVar[type[BaseModel] | None] = PipelineStateV2
    exits = False

    def migrate_state(self, from_version: str, state: dict[str, Any]) -> dict[str, Any]:
        if from_version != "1":
            raise ValueError(f"no migration from {from_version}")
        return {"completed": state["done"], "owner": state["owner"], "migrated_from": "1"}

    def advance(self, state: Any) -> None:
        state.completed = EDGE_STEPS + LANES * LANE_STEPS


class PipelineAgentV3(PipelineAgentV2):
    """Version 3 knows no migration from v1: a v1 checkpoint is state_incompatible."""

    version = "3"

    def migrate_state(self, from_version: str, state: dict[str, Any]) -> dict[str, Any]:
        raise ValueError(f"version 3 cannot read a version {from_version} checkpoint")


class Blob(BaseModel):
    blob: str = ""


class GrowsAgent(AgentContract):
    """Checkpoints a small state, then one of ``payload["size"]`` characters."""

    name = "grows"
    version = "1"
    intents = ("grows",)
    state_model: ClassVar[type[BaseModel] | None] = Blob

    async def execute(self, context: dict[str, Any]) -> Result:
        ctx = context["ctx"]
        await ctx.step("before", lambda: "recorded")
        ctx.state.blob = "small"
        await ctx.checkpoint()
        ctx.state.blob = "x" * int(context["payload"]["size"])
        await ctx.checkpoint()
        return Result(output={"blob": len(ctx.state.blob)})


class LargeAgent(AgentContract):
    """One step whose result is ``payload["size"]`` characters, then one that measures it
    (on the next delivery, with ``fail_once``: the big one is then read from its record)."""

    name = "large"
    version = "1"
    intents = ("large",)

    async def execute(self, context: dict[str, Any]) -> Result:
        ctx, size = context["ctx"], int(context["payload"]["size"])
        body = await ctx.step("big", lambda: "y" * size)
        if context["payload"].get("fail_once") and not ctx.resumed:
            raise RetryableError("the next delivery reads the big step back")
        n = await ctx.step("measure", len, body)
        return Result(output={"len": n})
