"""Audit writer throughput: events/s from the Redis outbox into PostgreSQL.

Fills the outbox streams with realistic events (submitted with a ~0.5 KB payload,
started, succeeded with the Result and its metrics; about 0.6 KB of JSON per event on
average), then times one AuditWriter draining them all (read, decode, redact, COPY,
de-dup insert, XACK+XDEL). Prints each run and the median.

    .venv/bin/python loadtests/bench_audit.py [--tasks 20000] [--runs 3] [--batch 5000]
    .venv/bin/python loadtests/bench_audit.py --sink-only   # the PostgreSQL path alone

Uses DEEPAGENTS_REDIS_URL / DEEPAGENTS_DATABASE_URL when set, else starts embedded
servers. Each run uses its own key prefix and schema and removes them afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson
from pydantic import SecretStr

# The event generator is shared with the tests, so both exercise the exact outbox format.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import FileConfig, Settings
from deepagents.store.audit.decode import BatchDecoder
from deepagents.store.audit.embedded import EmbeddedPostgres
from deepagents.store.audit.migrate import migrate
from deepagents.store.audit.redact import Redactor
from deepagents.store.audit.sink import PgSink
from deepagents.store.audit.writer import AuditWriter
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams import connect
from tests.audit.support import fill_outbox, task_events


@contextlib.contextmanager
def servers() -> Iterator[tuple[str, str]]:
    with contextlib.ExitStack() as stack:
        redis_url = (
            os.environ.get("DEEPAGENTS_REDIS_URL") or stack.enter_context(EmbeddedRedis()).url
        )
        pg_url = (
            os.environ.get("DEEPAGENTS_DATABASE_URL") or stack.enter_context(EmbeddedPostgres()).url
        )
        yield redis_url, pg_url


async def one_run(redis_url: str, pg_url: str, tasks: int, batch: int) -> tuple[int, float, int]:
    prefix, schema = f"bench{uuid.uuid4().hex[:8]}", f"bench_{uuid.uuid4().hex[:8]}"
    client = connect(redis_url)
    settings = Settings(
        redis_url=SecretStr(redis_url), database_url=SecretStr(pg_url), prefix=prefix,
        audit_schema=schema, audit_batch_size=batch, audit_batch_wait_ms=100,
    )  # fmt: skip
    try:
        await migrate(pg_url, schema)
        await client.sadd(Keys(prefix).agents_index, "echo")
        expected = await fill_outbox(client, prefix, "echo", 4, tasks)
        events = sum(len(v) for v in expected.values())
        sample: Any = await client.xrange(Keys(prefix).shard("echo", 0).outbox, count=300)
        size = sum(len(fields[b"events"]) for _, fields in sample) // max(1, len(sample))
        writer = AuditWriter(client, settings=settings, config=FileConfig(), run_migrations=False)
        started = time.perf_counter()
        task = asyncio.create_task(writer.run())
        while writer.stats.events + writer.stats.duplicates < events:
            await asyncio.sleep(0.01)  # a benchmark poll; cheap next to the work measured
        elapsed = time.perf_counter() - started
        writer.stop()
        await task
        return events, elapsed, size
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
        conn = await asyncpg.connect(pg_url)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


async def sink_run(pg_url: str, tasks: int, batch: int) -> tuple[int, float, int]:
    """The PostgreSQL path alone: COPY + de-dup insert of already mapped rows."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    now = datetime.now(UTC)
    entries = [("s", "1-0", {b"events": orjson.dumps(entry)})
               for i in range(tasks) for entry in task_events("echo", 0, now)]  # fmt: skip
    rows = BatchDecoder(Redactor()).rows(entries)
    await migrate(pg_url, schema)
    sink = PgSink(pg_url, schema)
    try:
        await sink.write(rows[:1])  # connect and create today's partition outside the timing
        started = time.perf_counter()
        for i in range(1, len(rows), batch):
            await sink.write(rows[i : i + batch])
        return len(rows) - 1, time.perf_counter() - started, 0
    finally:
        await sink.close()
        conn = await asyncpg.connect(pg_url)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


async def main(args: argparse.Namespace) -> None:
    with servers() as (redis_url, pg_url):
        rates = []
        for i in range(args.runs):
            if args.sink_only:
                events, elapsed, avg = await sink_run(pg_url, args.tasks, args.batch)
            else:
                events, elapsed, avg = await one_run(redis_url, pg_url, args.tasks, args.batch)
            rates.append(events / elapsed)
            rate = events / elapsed
            size = f" (~{avg} bytes of JSON per outbox entry)" if avg else ""
            print(f"run {i + 1}: {events} events in {elapsed:.2f} s = {rate:,.0f} events/s{size}")
        print(f"median of {args.runs}: {statistics.median(rates):,.0f} events/s "
              f"(batch {args.batch}, {os.cpu_count()} CPUs)")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks (3 events each)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--sink-only", action="store_true", help="time the PostgreSQL path alone")
    asyncio.run(main(parser.parse_args()))
