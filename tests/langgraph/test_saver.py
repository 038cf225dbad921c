"""``StepSaver`` beyond the conformance suite, on the session's real Redis: a checkpoint
stores only the channels that changed (a thread's storage grows with its steps, not with
its state times its steps); and ``import deepagents`` never imports LangGraph."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from redis.asyncio import Redis

from deepagents.langgraph import StepSaver
from deepagents.store.graph_threads import ThreadStore

DOC = "x" * 20_000


class Counter(TypedDict):
    doc: str
    i: int


def _counter(steps: int) -> StateGraph[Any]:
    graph = StateGraph(Counter)

    async def tick(state: Counter) -> dict[str, int]:
        return {"i": state["i"] + 1}

    graph.add_node("tick", tick)
    graph.add_edge(START, "tick")
    graph.add_conditional_edges("tick", lambda s: "tick" if s["i"] < steps else END)
    return graph


async def _stored(client: Redis, prefix: str, steps: int) -> int:
    store = ThreadStore(client, prefix)
    graph = _counter(steps).compile(checkpointer=StepSaver(store))
    config: Any = {"configurable": {"thread_id": f"t{steps}"}, "recursion_limit": steps + 10}
    final = await graph.ainvoke({"doc": DOC, "i": 0}, config)
    assert final == {"doc": DOC, "i": steps}
    fields = await store.load(f"t{steps}")
    return sum(len(k) + len(v) for k, v in fields.items())


async def test_a_checkpoint_stores_only_the_channels_that_changed(
    client: Redis, prefix: str
) -> None:
    short, long = await _stored(client, prefix, 10), await _stored(client, prefix, 40)
    # The 20 kB document is stored three times (the graph's input, its write, the channel),
    # however many checkpoints follow: a saver that kept the whole state per checkpoint
    # would hold 40 copies of it, and add one per step.
    per_step = (long - short) / 30
    assert per_step < 2_000, per_step  # the counter, its versions, the node's writes
    assert long < 3 * len(DOC) + 40 * 2_000, long


async def test_a_thread_read_back_has_every_checkpoint(client: Redis, prefix: str) -> None:
    store = ThreadStore(client, prefix)
    saver = StepSaver(store)
    graph = _counter(5).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "back"}}
    await graph.ainvoke({"doc": "d", "i": 0}, config)
    history = [s async for s in graph.aget_state_history(config)]
    assert [s.values.get("i") for s in history] == [5, 4, 3, 2, 1, 0, None]
    assert all(s.values.get("doc") in ("d", None) for s in history)
    assert await store.threads() == ["back"]


def test_importing_deepagents_imports_no_langgraph() -> None:
    code = (
        "import sys, deepagents, deepagents.worker, deepagents.orchestrator;"
        "print([m for m in sys.modules if m.split('.')[0] in ('langgraph', 'langchain_core')])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
