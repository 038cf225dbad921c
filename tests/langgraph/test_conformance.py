"""The saver against LangGraph's own conformance suite (``langgraph-checkpoint-conformance``),
on the session's real Redis: every base capability (put, put_writes, get_tuple, list,
delete_thread) must pass."""

from __future__ import annotations

from collections.abc import AsyncIterator

from langgraph.checkpoint.conformance import checkpointer_test, validate
from redis.asyncio import Redis

from deepagents.langgraph.saver import StepSaver
from deepagents.store.graph_threads import ThreadStore


async def test_base_suite_passes(client: Redis, prefix: str) -> None:
    @checkpointer_test(name="StepSaver")
    async def saver() -> AsyncIterator[StepSaver]:
        yield StepSaver(ThreadStore(client, prefix))

    report = await validate(saver)
    report.print_report()
    assert report.passed_all_base(), report
