"""A damaged append-only file (RELIABILITY.md row 26).

Cut off at the tail (a crash mid-write), Redis loads what precedes the cut: each task's
enqueue is one transaction in the file, so the part lost is the last tasks, whole, never a
task half written (a task hash without its stream entry would wait for ever; an entry
without its hash would run a task its submitter cannot see). Damaged in the
middle, Redis refuses to start rather than start empty, our ``status`` says Redis is not
there, and after the operator's ``redis-check-aof --fix`` the same holds as for a tail:
each task is whole or absent, and every task still there completes exactly once.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import FileConfig, Settings
from deepagents.contract import ErrorCode, ResultStatus, Task
from deepagents.errors import TransportError
from deepagents.orchestrator import Orchestrator, TaskHandle
from deepagents.transport.redis_streams import connect
from tests.e2e.conftest import assert_committed_once, committed_events, worker_procs

LAB = "tests.agents:LabAgent"

pytestmark = pytest.mark.slow

BATCHES, BATCH = 4, 100


def _aof(data: Path) -> Path:
    (incr,) = (data / "appendonlydir").glob("*.incr.aof")
    return incr


def _log(data: Path) -> str:
    return (data / "redis.log").read_text(errors="replace")


async def _submitted_then_killed(
    server: EmbeddedRedis, data: Path, prefix: str, config: FileConfig
) -> tuple[list[list[TaskHandle]], Path]:
    """BATCHES submits, one after the other; then Redis dies (``kill -9``). Returns the
    handles per submit and the append-only file they are in."""
    client = connect(server.url)
    settings = Settings(redis_url=server.url, prefix=prefix, outbox=True)
    try:
        async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
            batches = [
                await orch.submit_many([Task(intent="lab", payload={}) for _ in range(BATCH)])
                for _ in range(BATCHES)
            ]
    finally:
        await client.aclose()
    assert server.process is not None
    server.process.kill()
    server.process.wait(10)
    return batches, _aof(data)


async def _whole_or_absent(
    client: Redis,
    url: str,
    prefix: str,
    config: FileConfig,
    batches: list[list[TaskHandle]],
    start_worker: Callable[[], object],
) -> list[TaskHandle]:
    """Every task Redis still knows completes exactly once under the worker
    ``start_worker`` starts; every other one stays unknown. Returns the lost ones. The
    states are read before the worker starts: a worker that began one first would show it
    running."""
    settings = Settings(redis_url=url, prefix=prefix, outbox=True)
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        handles = [h for batch in batches for h in batch]
        states = await asyncio.gather(*(orch.task_state(h.task_id) for h in handles))
        assert set(states) <= {"queued", None}, set(states)
        start_worker()
        kept = [h for h, state in zip(handles, states, strict=True) if state is not None]
        lost = [h for h, state in zip(handles, states, strict=True) if state is None]
        results = await asyncio.gather(*(orch.wait_result(h, 60) for h in kept))
        assert all(r.status is ResultStatus.SUCCESS for r in results)
        committed = await committed_events(client, prefix, "lab", 2)
        assert_committed_once(committed, [h.task_id for h in kept])
        assert set(committed) == {h.task_id for h in kept}, "a lost task ran"
        after = await asyncio.gather(*(orch.task_state(h.task_id) for h in lost))
        assert after == [None] * len(lost)
    return lost


async def test_a_cut_tail_loses_the_last_tasks_whole_and_the_rest_complete_once(
    durable: EmbeddedRedis, durable_dir: Path, prefix: str, config: FileConfig, config_path: Path
) -> None:
    batches, aof = await _submitted_then_killed(durable, durable_dir, prefix, config)
    with aof.open("r+b") as f:  # `truncate -s -7`: a crash in the middle of the last write
        f.truncate(aof.stat().st_size - 7)
    durable.start()  # aof-load-truncated (the default): loads what precedes the cut
    assert "loaded anyway because aof-load-truncated is enabled" in _log(durable_dir)
    procs = worker_procs(durable.url, prefix, config_path)
    client = connect(durable.url)
    try:
        lost = await _whole_or_absent(
            client, durable.url, prefix, config, batches, lambda: procs.worker(LAB)
        )
        assert lost, "the cut lost nothing: the test did not damage the file"
        assert {h.task_id for h in lost} <= {h.task_id for h in batches[-1]}
    finally:
        procs.close()
        await client.aclose()


def _positions(data: bytes, batches: list[list[TaskHandle]]) -> dict[str, int]:
    """Where each task's enqueue sits in the file: the offset of its task JSON."""
    return {
        h.task_id: data.index(b'{"task_id":"%s"' % h.task_id.encode())
        for batch in batches
        for h in batch
    }


def _middle_enqueue(data: bytes) -> tuple[int, int]:
    """The offsets of the middle task's enqueue transaction and of its task JSON."""
    multi = data.index(b"*1\r\n$5\r\nMULTI\r\n", len(data) // 2)
    return multi, data.index(b'{"task_id":', multi)


async def test_a_damaged_frame_stops_redis_and_the_fixed_file_keeps_tasks_whole(
    durable: EmbeddedRedis, durable_dir: Path, prefix: str, config: FileConfig, config_path: Path
) -> None:
    batches, aof = await _submitted_then_killed(durable, durable_dir, prefix, config)
    original = aof.read_bytes()
    multi, _ = _middle_enqueue(original)
    damage = multi + len(b"*1\r\n$5\r\nMULTI\r\n")  # the '*' of the XADD's header
    with aof.open("r+b") as f:  # `printf XX | dd conv=notrunc seek=...`
        f.seek(damage)
        f.write(b"XX")
    with pytest.raises(TransportError, match="exited at start"):
        durable.start()
    assert "Bad file format reading the append only file" in _log(durable_dir)
    procs = worker_procs(durable.url, prefix, config_path)
    try:
        status = await asyncio.to_thread(procs.run, "status")
        assert status.returncode != 0
        assert len(status.stderr.strip().splitlines()) == 1, status.stderr
        assert "Traceback" not in status.stderr and "redis" in status.stderr.lower()
        # The operator's repair: cut the file at the damage (it asks; answer yes).
        fixed = subprocess.run(
            ["redis-check-aof", "--fix", str(aof)],
            input="y\n",
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert fixed.returncode == 0, fixed.stdout + fixed.stderr
        durable.start()
        client = connect(durable.url)
        try:
            lost = await _whole_or_absent(
                client, durable.url, prefix, config, batches, lambda: procs.worker(LAB)
            )
        finally:
            await client.aclose()
        # Exactly the tasks enqueued from the damage on are gone (the middle one too).
        positions = _positions(original, batches)
        after_damage = {t for t, at in positions.items() if at > damage}
        assert lost and {h.task_id for h in lost} == after_damage
    finally:
        procs.close()


async def test_a_damaged_value_loads_and_its_entry_is_dead_lettered_with_the_reason(
    durable: EmbeddedRedis, durable_dir: Path, prefix: str, config: FileConfig, config_path: Path
) -> None:
    """The file's frames carry lengths, not checksums: a byte changed inside a value loads
    without a word. The worker's decoder is what notices, and dead-letters that entry; the
    task id is still in its text, so its task is failed with the reason (issue 24, item 8:
    its submitter waited out its timeout)."""
    batches, aof = await _submitted_then_killed(durable, durable_dir, prefix, config)
    original = aof.read_bytes()
    _, body = _middle_enqueue(original)
    damaged = original[body + len(b'{"task_id":"') :].split(b'"', 1)[0].decode()
    with aof.open("r+b") as f:
        f.seek(body)
        f.write(b"XX")  # the task JSON's opening brace and quote
    durable.start()
    procs = worker_procs(durable.url, prefix, config_path)
    client = connect(durable.url)
    try:
        procs.worker(LAB)
        settings = Settings(redis_url=durable.url, prefix=prefix, outbox=True)
        async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
            others = [h for batch in batches for h in batch if h.task_id != damaged]
            results = await asyncio.gather(*(orch.wait_result(h, 60) for h in others))
            assert all(r.status is ResultStatus.SUCCESS for r in results)
            (handle,) = [h for batch in batches for h in batch if h.task_id == damaged]
            failed = await orch.wait_result(handle, 60)
        assert failed.error is not None and failed.error.code == ErrorCode.DEAD_LETTERED
        assert failed.error.message.startswith("decode_error: JSONDecodeError")
        committed = await committed_events(client, prefix, "lab", 2)
        assert_committed_once(committed, [h.task_id for h in others])
        assert [e["type"] for e in committed[damaged]] == ["dead_lettered"]
        listed = await asyncio.to_thread(procs.run, "dlq", "list", "--agent", "lab", "--json")
        assert listed.returncode == 0, listed.stderr
        (letter,) = orjson.loads(listed.stdout)
        assert letter["reason"] == "decode_error", letter
    finally:
        procs.close()
        await client.aclose()
