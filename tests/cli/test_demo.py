"""Issue 24 item 5: the demo, piped as a new user would read it (or paste it), does not wrap
its tables and explains its failures."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from tests.audit.conftest import schema
from tests.cli.support import clean_env, deepagents, one_line_error, table_rows

__all__ = ["schema"]  # a fixture, used by name


async def _demo_keys(client: Redis) -> set[bytes]:
    return {key async for key in client.scan_iter(match="demo-*", count=1000)}


async def test_piped_demo_output_is_readable(
    redis_url: str, pg_url: str, schema: str, client: Redis
) -> None:
    before = await _demo_keys(client)
    env = clean_env(
        DEEPAGENTS_REDIS_URL=redis_url,
        DEEPAGENTS_DATABASE_URL=pg_url,
        DEEPAGENTS_AUDIT_SCHEMA=schema,
        PYTHONIOENCODING="utf-8",
    )
    args = ("demo", "--tasks", "600", "--rate", "600", "--graphs", "0")  # graphs: below
    done = await asyncio.to_thread(deepagents, *args, env=env, timeout=170)
    out = done.stdout
    assert done.returncode == 0, done.stderr[-3000:]
    lines = out.splitlines()
    # the headline is one line, not a table title wrapped to the table's width
    assert any("tasks in" in line and "dead-lettered" in line for line in lines), out
    # the failures are explained: the demo injects them
    why = [line for line in lines if line.strip().startswith("invalid_input=")]
    assert why and "on purpose" in why[0], out
    # the audit table: one line per event, none wrapped into a second line of its cells
    trail = out[out.index("audit trail of research task") :]
    rows = table_rows(trail, "")
    events = [cells for cells in rows if cells[0]]
    assert len(events) >= 2, trail  # at least started and succeeded
    assert len(events) == len(rows), trail  # a wrapped row starts with an empty cell
    assert any(c[1] == "succeeded" and c[2].startswith("research@") for c in events), trail
    # its throwaway prefix is gone, workers' keys included (they were deleted before the
    # workers stopped, which re-created their streams)
    assert await _demo_keys(client) - before == set()


async def test_the_demo_pipelines_complete_through_their_approval(
    redis_url: str, pg_url: str, schema: str
) -> None:
    """Issue 19: the demo's research pipelines stop to ask for an approval, its automatic
    approver answers through ``Orchestrator.reply``, and each pipeline resumes and finishes;
    the trail shows its question, the reply, the resume and its steps by phase. Beside
    them a LangGraph research graph (agents/research_graph.py) parks at its ``interrupt()``,
    is approved by the same approver through the reply API, and publishes."""
    env = clean_env(
        DEEPAGENTS_REDIS_URL=redis_url,
        DEEPAGENTS_DATABASE_URL=pg_url,
        DEEPAGENTS_AUDIT_SCHEMA=schema,
        PYTHONIOENCODING="utf-8",
    )
    args = ("demo", "--tasks", "40", "--rate", "200", "--pipelines", "2", "--graphs", "1")
    done = await asyncio.to_thread(deepagents, *args, env=env, timeout=170)
    out = done.stdout
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in out.splitlines() if "research pipelines" in line]
    assert line.startswith("2 research pipelines"), line
    assert "2 questions answered by the demo's automatic approver" in line, line
    assert "2 approved and finished, 0 failed, 0 refused, 0 degraded" in line, line
    (graph,) = [line for line in out.splitlines() if "LangGraph research graph" in line]
    assert graph.startswith("1 LangGraph research graph (plan, search tool"), graph
    assert "1 approved by the demo's automatic approver; 1 published, 0 failed" in graph, graph
    trail = out[out.index("audit trail of research pipeline") :]
    events = [cells for cells in table_rows(trail, "") if cells[0]]
    kinds = [cells[1] for cells in events]
    assert kinds[-1] == "succeeded", trail
    order = [kinds.index(k) for k in ("waiting", "replied", "resumed", "succeeded")]
    assert order == sorted(order), trail
    steps = [cells for cells in events if cells[1] == "step_completed"]
    assert {c[6].split(" · ")[0] for c in steps} == {"preparation", "execution", "finalization"}
    assert all(c[7] for c in steps), trail  # each step's duration
    model_steps = [c for c in steps if c[6].split(" · ")[1].split("#")[-1].startswith("analyse")]
    assert len(model_steps) == 4 and all(float(c[9]) > 0 for c in model_steps), trail  # cost


def test_a_negative_pipeline_count_is_one_line() -> None:
    done = deepagents("demo", "--pipelines", "-1", env=clean_env())
    one_line_error(done, 2, "--pipelines must be 0 or more")
    done = deepagents("demo", "--graphs", "-1", env=clean_env())
    one_line_error(done, 2, "--graphs must be 0 or more")
