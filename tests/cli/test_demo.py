"""Issue 24 item 5: the demo, piped as a new user would read it (or paste it), does not wrap
its tables and explains its failures."""

from __future__ import annotations

import asyncio

from tests.audit.conftest import schema
from tests.cli.support import clean_env, deepagents, table_rows

__all__ = ["schema"]  # a fixture, used by name


async def test_piped_demo_output_is_readable(redis_url: str, pg_url: str, schema: str) -> None:
    env = clean_env(
        DEEPAGENTS_REDIS_URL=redis_url,
        DEEPAGENTS_DATABASE_URL=pg_url,
        DEEPAGENTS_AUDIT_SCHEMA=schema,
        PYTHONIOENCODING="utf-8",
    )
    args = ("demo", "--tasks", "600", "--rate", "600")
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
