"""Per-step checkpoint cost of LangGraph graphs: deepagents' ``StepSaver`` beside LangGraph's
``InMemorySaver``, ``AsyncSqliteSaver`` and ``AsyncPostgresSaver`` (issue 33).

    .venv/bin/python loadtests/bench_langgraph.py --runs 3 \\
        --database-url postgresql://postgres@127.0.0.1:5432/test

The same graph for each: a chain of ``--nodes`` nodes (each adds one to a counter), run for
``--threads`` threads at once, ``durability="sync"`` (a super-step's checkpoint lands before
the next node starts). Latency: the threads run one after another, and a step's cost is the
time from one node's start to the next node's start: the checkpoint write and LangGraph's
own work; p50/p99 in ms over every step of every thread. Throughput: the threads again, all
at once; wall time / (threads x nodes) in ms.

- ``stepsaver``: a ``LangGraphAgent`` in an in-process worker (one slot per thread) on a
  fresh embedded Redis (or ``--redis-url``): each thread is a task; its checkpoints are
  owner-checked records sent through the worker's group commit;
- ``inmemory``: ``InMemorySaver`` (not durable), the floor;
- ``sqlite``: ``AsyncSqliteSaver`` on a file in a temporary directory (one connection);
- ``postgres``: ``AsyncPostgresSaver`` on a psycopg pool of 10 (skipped without
  ``--database-url``).

Also: storage per thread after the run (bytes of the thread's records; for Postgres, of its
rows in checkpoints, checkpoint_blobs and checkpoint_writes, ``pg_column_size``: after
PostgreSQL's own compression), and of one thread of a one-node loop after
``--storage-steps`` steps.
Prints a JSON line per run and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import time
import uuid
from collections import defaultdict
from typing import Any, ClassVar, TypedDict, cast

import orjson
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from deepagents import Task
from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import Settings, parse_config
from deepagents.langgraph import GraphKit, LangGraphAgent, StepSaver
from deepagents.orchestrator import Orchestrator
from deepagents.store.graph_threads import ThreadStore
from deepagents.transport.redis_streams import connect
from deepagents.worker import Worker

# thread id -> perf_counter at each node's start
STARTS: dict[str, list[float]] = defaultdict(list)
NODES = 20


class Chain(TypedDict):
    thread: str
    i: int


def chain(nodes: int) -> StateGraph[Any]:
    graph = StateGraph(Chain)

    async def node(state: Chain) -> dict[str, int]:
        STARTS[state["thread"]].append(time.perf_counter())
        return {"i": state["i"] + 1}

    names = [f"n{k}" for k in range(nodes)]
    for name in names:
        graph.add_node(name, node)
    graph.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        graph.add_edge(a, b)
    graph.add_edge(names[-1], END)
    return graph


class ChainAgent(LangGraphAgent):
    name = "chain"
    version = "1.0.0"
    intents = ("chain",)
    recursion_limit: ClassVar[int] = 1000

    def build_graph(self, kit: GraphKit) -> StateGraph[Any]:
        return chain(NODES)

    def graph_input(self, task: Task) -> Any:
        return {"thread": task.task_id, "i": 0}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def step_costs() -> dict[str, float]:
    gaps = [(b - a) * 1000 for starts in STARTS.values() for a, b in itertools.pairwise(starts)]
    return {"p50_ms": round(pct(gaps, 0.5), 3), "p99_ms": round(pct(gaps, 0.99), 3)}


async def langgraph_saver(saver: BaseCheckpointSaver[Any], threads: int) -> dict[str, float]:
    STARTS.clear()
    graph = chain(NODES).compile(checkpointer=saver)

    async def one() -> None:
        thread = str(uuid.uuid4())
        config: Any = {"configurable": {"thread_id": thread}, "recursion_limit": 1000}
        await graph.ainvoke({"thread": thread, "i": 0}, config, durability="sync")

    for _ in range(threads):  # latency: one thread at a time
        await one()
    costs = step_costs()
    started = time.perf_counter()  # throughput: every thread at once
    await asyncio.gather(*(one() for _ in range(threads)))
    wall = time.perf_counter() - started
    return {**costs, "concurrent_ms_per_step": round(wall * 1000 / (threads * NODES), 3)}


class Loop(TypedDict):
    i: int
    note: str


def loop(steps: int) -> StateGraph[Any]:
    """One node run ``steps`` times: storage per thread after that many steps."""
    graph = StateGraph(Loop)

    async def tick(state: Loop) -> dict[str, Any]:
        return {"i": state["i"] + 1, "note": f"step {state['i'] + 1} of the loop"}

    graph.add_node("tick", tick)
    graph.add_edge(START, "tick")
    graph.add_conditional_edges("tick", lambda s: "tick" if s["i"] < steps else END)
    return graph


async def loop_thread(saver: BaseCheckpointSaver[Any], steps: int) -> str:
    thread = str(uuid.uuid4())
    config: Any = {"configurable": {"thread_id": thread}, "recursion_limit": steps + 10}
    graph = loop(steps).compile(checkpointer=saver)
    await graph.ainvoke({"i": 0, "note": ""}, config, durability="sync")
    return thread


async def stepsaver_storage(url: str, steps: int) -> int:
    """Bytes of one thread's records (field names and values) after ``steps`` steps: the
    records a task's graph keeps, here in a ``ThreadStore`` (the same fields)."""
    client = connect(url)
    store = ThreadStore(client, f"lgbench{uuid.uuid4().hex[:8]}")
    try:
        thread = await loop_thread(StepSaver(store), steps)
        fields = await store.load(thread)
        await store.delete(thread)
    finally:
        await client.aclose()
    return sum(len(k) + len(v) for k, v in fields.items())


CONFIG = """
tiers: {{p2: {{concurrency: {threads}, max_wait_ms: 600000}}}}
default_tier: p2
defaults: {{shards: 1, block_ms: 100}}
"""


async def stepsaver(url: str, threads: int) -> dict[str, float]:
    STARTS.clear()
    prefix = f"lgbench{uuid.uuid4().hex[:8]}"
    config = parse_config(CONFIG.format(threads=threads))
    settings = Settings(prefix=prefix, outbox=True)
    client = connect(url)
    worker = Worker.from_client(ChainAgent(), client=client, config=config, settings=settings)
    running = asyncio.create_task(worker.run())
    await worker.ready.wait()
    try:
        async with Orchestrator.from_client(
            client, config=config, settings=settings, agents=[ChainAgent]
        ) as orch:
            for _ in range(threads):  # latency: one thread at a time
                handle = await orch.submit(Task(intent="chain", payload={}))
                result = await handle.result(timeout=120)
                assert result.output["i"] == NODES, result
            costs = step_costs()
            started = time.perf_counter()  # throughput: every thread at once
            handles = [await orch.submit(Task(intent="chain", payload={})) for _ in range(threads)]
            for handle in handles:
                result = await handle.result(timeout=120)
                assert result.output["i"] == NODES, result
            wall = time.perf_counter() - started
        sizes = []
        async for key in client.scan_iter(match=f"{prefix}*:s:*"):
            fields = await client.hgetall(key)
            sizes.append(sum(len(k) + len(v) for k, v in fields.items()))
    finally:
        worker.stop()
        await running
        async for key in client.scan_iter(match=f"{prefix}*"):
            await client.delete(key)
        await client.aclose()
    return {
        **costs,
        "concurrent_ms_per_step": round(wall * 1000 / (threads * NODES), 3),
        "bytes_per_thread": statistics.median(sizes) if sizes else 0,
    }


async def sqlite(threads: int, storage_steps: int) -> dict[str, float]:
    import tempfile

    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    with tempfile.TemporaryDirectory(prefix="lgbench") as tmp:
        async with AsyncSqliteSaver.from_conn_string(f"{tmp}/checkpoints.db") as saver:
            out = await langgraph_saver(saver, threads)
            long = await loop_thread(saver, storage_steps)
            async with saver.conn.execute(
                "SELECT (SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0)"
                " FROM checkpoints WHERE thread_id = ?)"
                " + (SELECT coalesce(sum(length(value)), 0) FROM writes WHERE thread_id = ?)",
                (long, long),
            ) as cursor:
                row = await cursor.fetchone()
            size = int(row[0]) if row is not None else 0
    return {**out, f"bytes_after_{storage_steps}_steps": size}


async def postgres(url: str, threads: int, storage_steps: int) -> dict[str, float]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    async with AsyncConnectionPool(url, kwargs=kwargs, max_size=10, open=False) as pool:
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await saver.setup()
        out = await langgraph_saver(saver, threads)
        long = await loop_thread(saver, storage_steps)
        async with pool.connection() as conn:
            row = await (
                await conn.execute(
                    "SELECT (SELECT sum(pg_column_size(c.*)) FROM checkpoints c)"
                    " + (SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM checkpoint_blobs b)"
                    " + (SELECT coalesce(sum(pg_column_size(w.*)), 0) FROM checkpoint_writes w)"
                    " AS total, (SELECT count(DISTINCT thread_id) FROM checkpoints) AS threads"
                )
            ).fetchone()
            one = await (
                await conn.execute(
                    "SELECT (SELECT sum(pg_column_size(c.*)) FROM checkpoints c"
                    "  WHERE thread_id = %(t)s)"
                    " + (SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM checkpoint_blobs b"
                    "  WHERE thread_id = %(t)s)"
                    " + (SELECT coalesce(sum(pg_column_size(w.*)), 0) FROM checkpoint_writes w"
                    "  WHERE thread_id = %(t)s) AS total",
                    {"t": long},
                )
            ).fetchone()
            assert one is not None
            assert row is not None
            found = cast(dict[str, Any], row)
            for table in ("checkpoint_writes", "checkpoint_blobs", "checkpoints"):
                await conn.execute(f"DELETE FROM {table}")
    # less the long thread, counted apart
    per_thread = (float(found["total"]) - float(cast(dict[str, Any], one)["total"])) / max(
        1, int(found["threads"]) - 1
    )
    return {
        **out,
        "bytes_per_thread": round(per_thread),
        f"bytes_after_{storage_steps}_steps": int(cast(dict[str, Any], one)["total"]),
    }


async def one_run(redis_url: str, args: argparse.Namespace, run: int) -> dict[str, Any]:
    out: dict[str, Any] = {"run": run}
    for name, value in (await stepsaver(redis_url, args.threads)).items():
        out[f"stepsaver_{name}"] = value
    steps = args.storage_steps
    out[f"stepsaver_bytes_after_{steps}_steps"] = await stepsaver_storage(redis_url, steps)
    for name, value in (await langgraph_saver(InMemorySaver(), args.threads)).items():
        out[f"inmemory_{name}"] = value
    for name, value in (await sqlite(args.threads, args.storage_steps)).items():
        out[f"sqlite_{name}"] = value
    if args.database_url:
        for name, value in (
            await postgres(args.database_url, args.threads, args.storage_steps)
        ).items():
            out[f"postgres_{name}"] = value
    return out


async def main(args: argparse.Namespace) -> None:
    global NODES
    NODES = args.nodes
    runs = []
    for run in range(args.runs):
        if args.redis_url:
            runs.append(await one_run(args.redis_url, args, run))
        else:
            with EmbeddedRedis() as server:
                runs.append(await one_run(server.url, args, run))
        print(orjson.dumps(runs[-1]).decode(), flush=True)
    keys = [k for k in runs[0] if k != "run"]
    medians = {k: statistics.median(r[k] for r in runs) for k in keys}
    print("median " + orjson.dumps(medians).decode())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--storage-steps", type=int, default=200)
    parser.add_argument("--redis-url", help="default: a fresh embedded Redis per run")
    parser.add_argument("--database-url", help="PostgreSQL for AsyncPostgresSaver")
    asyncio.run(main(parser.parse_args()))
