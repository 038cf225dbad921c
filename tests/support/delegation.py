"""Agents that delegate, for the delegation tests (not shipped in agents/).

``FamilyAgent`` (intents ``family.*``) is parent and child in one agent type, for the
in-process harness: ``family.fanout`` delegates ``n`` children with ``limit``;
``family.recurse`` delegates to itself until the depth limit refuses it; ``family.child``
is a child. ``ParentAgent`` (``fanout``) delegates to ``HelperAgent`` (``helper``),
another agent type, for the tests with real worker processes.

A child appends ``start <task id> <pid>`` when it starts and ``end <task id>`` just before
it returns, to the file its payload names (O_APPEND, one write per line): how many run at
once is read back from that file; ``runs`` in the parent's payload counts its runs, and
``hold`` keeps a parent's second run running that long before it delegates again."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from deepagents import AgentContract, Delegation, ErrorCode, Result
from deepagents.contract.result import ResultMetrics


def _line(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


async def run_child(context: dict[str, Any]) -> Result:
    task = context["task"]
    payload, task_id = context["payload"], task.task_id
    path = payload.get("effects")
    if path:
        _line(path, f"start {task_id} {os.getpid()}\n")
    sleeps = payload.get("sleeps") or []  # per child, by index; else ``sleep`` for all
    i = payload.get("i", 0)
    await asyncio.sleep(float(sleeps[i] if i < len(sleeps) else payload.get("sleep", 0.0)))
    if path:
        _line(path, f"end {task_id}\n")
    if payload.get("fail"):
        return Result.failed(ErrorCode.AGENT_ERROR, f"child {payload.get('i')} was told to fail")
    # what a model call would have cost it: the parent's Result counts it
    spend = ResultMetrics(tokens_used=10, cost_usd=0.5)
    output = {"i": payload.get("i"), "tenant": task.tenant, "depth": task.depth}
    return Result(output=output, metrics=spend)


async def run_parent(context: dict[str, Any], child_intent: str) -> Result:
    ctx, payload = context["ctx"], context["payload"]
    if payload.get("runs"):
        _line(payload["runs"], f"run {os.getpid()}\n")
        with open(payload["runs"]) as runs:
            again = len(runs.readlines()) > 1
        if again and payload.get("hold"):  # woken by a child's end: runs on, for a while
            await asyncio.sleep(float(payload["hold"]))
    n, limit = int(payload.get("n", 1)), payload.get("limit")
    calls = [
        Delegation(
            child_intent,
            {
                "i": i,
                "effects": payload.get("effects", ""),
                "sleep": payload.get("sleep", 0.0),
                "sleeps": payload.get("sleeps", []),
                "fail": i in payload.get("fail", []),
            },
        )
        for i in range(n)
    ]
    results = await ctx.delegate_many(calls, limit=limit)
    return Result(
        output={
            "children": [r.task_id for r in results],
            "statuses": [r.status.value for r in results],
            "outputs": [r.output for r in results],
        }
    )


class FamilyAgent(AgentContract):
    name = "family"
    version = "1"
    intents = ("family.fanout", "family.child", "family.recurse", "family.one", "family.bad")

    async def execute(self, context: dict[str, Any]) -> Result:
        intent = context["task"].intent
        if intent == "family.child":
            return await run_child(context)
        if intent == "family.recurse":
            child = await context["ctx"].delegate("family.recurse", {})
            return Result(output={"below": child.model_dump(mode="json")})
        if intent == "family.bad":  # an intent no task may have
            await context["ctx"].delegate("not an intent!", {})
        if intent == "family.one":
            child = await context["ctx"].delegate("family.child", {"i": 7})
            return Result(output={"child": child.output, "status": child.status.value})
        return await run_parent(context, "family.child")


class ParentAgent(AgentContract):
    name = "parent"
    version = "1"
    intents = ("fanout",)

    async def execute(self, context: dict[str, Any]) -> Result:
        return await run_parent(context, "help")


class HelperAgent(AgentContract):
    name = "helper"
    version = "1"
    intents = ("help",)

    async def execute(self, context: dict[str, Any]) -> Result:
        return await run_child(context)


def most_at_once(lines: list[str]) -> int:
    """The most children running at one time, from their start and end lines."""
    running = most = 0
    for line in lines:
        running += 1 if line.startswith("start ") else -1 if line.startswith("end ") else 0
        most = max(most, running)
    return most


class SpendingParent(AgentContract):
    """``spend``: delegates ``n`` children that each make one metered model call, then (with
    ``ask``) makes one of its own through the tool loop, under ``Limits(cost_usd=...)``
    when the payload gives ``cost_usd``: the children's spend counts against it."""

    name = "spender"
    version = "1"
    intents = ("spend",)

    async def execute(self, context: dict[str, Any]) -> Result:
        from deepagents.agentkit import Limits, run_tools

        ctx, payload, task = context["ctx"], context["payload"], context["task"]
        calls = [Delegation("metered", {"i": i}) for i in range(int(payload.get("n", 2)))]
        results = await ctx.delegate_many(calls)
        output: dict[str, Any] = {"children": [r.task_id for r in results]}
        if payload.get("ask"):
            limit = payload.get("cost_usd")
            loop = await run_tools(
                model="sim",
                messages=[{"role": "user", "content": "Sum up what the children found."}],
                middleware=[Limits(cost_usd=limit)] if limit else [],
                task=task,
            )
            output["answer"] = loop.text
        return Result(output=output)


class MeteredChild(AgentContract):
    """``metered``: one model call on the model ``sim``; its usage is the Result's."""

    name = "metered"
    version = "1"
    intents = ("metered",)

    async def execute(self, context: dict[str, Any]) -> Result:
        from deepagents.modelcall import wrap_model_call

        i = context["payload"]["i"]
        reply = await wrap_model_call(
            "sim", prompt=f"Find fact {i}.", task=context["task"], agent=self.name
        )
        return Result(output={"i": i, "text": reply.text})
