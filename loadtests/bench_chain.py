"""Overhead of the agent toolkit's middleware chain per model call (and per tool call).

    .venv/bin/python loadtests/bench_chain.py --calls 20000 --messages 10 --chars 500 \
        [--history one_new|all_new]

Five built-ins on (guardrail, loop detection, limits, context budget, PII redaction, in the
order of config/deepagents.yaml), paired against no chain: each iteration runs one model
turn (before_model, the nested wrap_model_call hooks, after_model) with the chain, then one
without, in alternating order, around the same innermost handler. The handler answers at
once (no network), so the difference is the chain's own cost; a real model call adds its
network time to both sides alike. The history is ``--messages`` messages of ``--chars``
characters (the PII patterns and the budget's estimate read all of it). Prints p50/p99 of
each side and of the paired difference, in microseconds, for model calls and tool calls.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from deepagents.agentkit import (
    AgentState,
    Chain,
    ContextBudget,
    Guardrail,
    Limits,
    LoopDetection,
    ModelRequest,
    ModelResponse,
    PiiRedaction,
    ToolRequest,
)
from deepagents.config.middleware import BudgetStrategy, GuardRule
from deepagents.contract.toolcalls import ToolCall, ToolResult

ANSWER = ModelResponse("fine", ())
TEXT = "The customer wrote about order A-1001, delivered on time, and asked for a refund. "


def five() -> Chain:
    return Chain(
        [
            Guardrail(deny=[GuardRule(tool="delete_*")]),
            LoopDetection(repeats=3),
            Limits(model_calls=10**9, tool_calls=10**9),
            ContextBudget(strategy=BudgetStrategy.TRUNCATE, window_tokens=10**6),
            PiiRedaction(),
        ]
    )


async def model(request: ModelRequest) -> ModelResponse:
    return ANSWER


async def tool(request: ToolRequest) -> ToolResult:
    return ToolResult(request.call.id, request.call.name, {"ok": True})


def model_turn(chain: Chain, state: AgentState) -> Callable[[], Awaitable[Any]]:
    handler = chain.model_handler(model)
    counter = iter(range(10**12))
    fresh = state.agent == "all_new"
    last = state.messages[-1]["content"]

    async def turn() -> None:
        # As in a run, the last message is new text each turn (the rest was seen before);
        # with --history all_new, every message is (a run's state, its memo, started anew).
        state.messages[-1] = {"role": "user", "content": f"{next(counter)} {last}"}
        if fresh:
            state._memos.clear()
        await chain.before_model(state)
        await handler(ModelRequest("m", state.messages, (), state))
        await chain.after_model(state)

    return turn


def tool_turn(chain: Chain, state: AgentState) -> Callable[[], Awaitable[Any]]:
    handler = chain.tool_handler(tool)
    counter = iter(range(10**12))

    async def turn() -> None:  # a new argument each time: loop detection must not stop it
        call = ToolCall("c", "lookup_order", {"order_id": f"A-{next(counter)}"})
        await handler(ToolRequest(call, None, state))

    return turn


async def paired(
    make: Callable[[Chain, AgentState], Callable[[], Awaitable[Any]]], args: argparse.Namespace
) -> dict[str, float]:
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": (TEXT * 20)[: args.chars]}
        for i in range(args.messages)
    ]
    with_chain = make(five(), AgentState(args.history, "m", list(messages), {}))
    without = make(Chain(), AgentState(args.history, "m", list(messages), {}))
    on: list[int] = []
    off: list[int] = []
    for i in range(args.calls):
        first, second = (with_chain, without) if i % 2 == 0 else (without, with_chain)
        t0 = time.perf_counter_ns()
        await first()
        t1 = time.perf_counter_ns()
        await second()
        t2 = time.perf_counter_ns()
        a, b = t1 - t0, t2 - t1
        on.append(a if first is with_chain else b)
        off.append(b if first is with_chain else a)
    diff = [x - y for x, y in zip(on, off, strict=True)]
    return {
        "chain_p50_us": _us(statistics.median(on)),
        "chain_p99_us": _us(_p99(on)),
        "none_p50_us": _us(statistics.median(off)),
        "overhead_p50_us": _us(statistics.median(diff)),
        "overhead_p99_us": _us(_p99(diff)),
    }


def _p99(values: list[int]) -> float:
    return sorted(values)[int(len(values) * 0.99)]


def _us(ns: float) -> float:
    return round(ns / 1000, 2)


async def main(args: argparse.Namespace) -> None:
    for name, make in (("model_call", model_turn), ("tool_call", tool_turn)):
        await paired(make, argparse.Namespace(**{**vars(args), "calls": 500}))  # warm up
        figures = await paired(make, args)
        line = {"per": name, "history": args.history, **figures}
        print(orjson.dumps(line).decode(), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--chars", type=int, default=500)
    parser.add_argument("--history", choices=("one_new", "all_new"), default="one_new")
    asyncio.run(main(parser.parse_args()))
