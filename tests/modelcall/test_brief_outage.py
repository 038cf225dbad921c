"""A brief outage of a busy model server: the simulator, as its own process, has answered
over a thousand calls in the breaker's window, then is killed with ``kill -9`` and started
again on its port. The breaker's streak (distinct tasks finding no server, no success
between) opens the circuit after ``down_after`` tasks, whatever successes the window holds;
while open no call reaches the dead port; once the server is back a probe closes it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from redis.asyncio import Redis

from deepagents._internal.redis_server import free_port
from deepagents.modelcall import ModelCalls, wrap_model_call
from deepagents.modelcall.record import ModelReply
from deepagents.store.models.gates import BreakerState
from deepagents.telemetry.logs import current_task_id
from tests.modelcall.conftest import MakeCalls, model_config
from tests.support.replies import as_bytes
from tests.support.wait import eventually, eventually_sync

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
BEFORE = 1_100
DOWN_AFTER = 5  # the default
# The defaults (a 30 s window, min_calls 5, failure_rate 0.5, down_after 5), but a short
# cool-down; three retries per call, fast.
OPTIONS = {
    "breaker": {"cooldown_s": 1.0},
    "retry": {"max_retries": 3, "base_s": 0.01, "max_backoff_s": 0.05},
    "limits": {"concurrency": 64},
}


def _serve(port: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "deepagents", "sim-model", "--port", str(port)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def listening() -> bool:
        assert proc.poll() is None, "the simulator exited"
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        return False

    eventually_sync(listening, timeout=30, what="the model simulator listening")
    return proc


@pytest.fixture
def server() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait(10)


async def call(calls: ModelCalls, i: int) -> ModelReply:
    """One call of task ``i``, as a worker makes it (the task id in its context)."""
    token = current_task_id.set(f"task-{i}")
    try:
        return await wrap_model_call("m", prompt=f"question {i}", calls=calls, fallback="fb")
    finally:
        current_task_id.reset(token)


async def test_a_brief_outage_of_a_busy_model_server_opens_the_circuit_at_once(
    server: list[subprocess.Popen[bytes]], make_calls: MakeCalls, client: Redis
) -> None:
    port = free_port()
    server.append(_serve(port))
    calls = make_calls({"m": model_config(f"http://127.0.0.1:{port}/v1", **OPTIONS)})
    runtime = calls.runtime("m")
    replies: list[ModelReply] = []
    for start in range(0, BEFORE, 100):  # busy, but no call queued past its deadline
        replies += await asyncio.gather(*(call(calls, start + i) for i in range(100)))
    assert not any(r.degraded for r in replies), {r.reason for r in replies}
    await runtime.breaker.flush()
    window = await client.hgetall(runtime.keys.breaker_window)
    assert sum(int(v) for k, v in window.items() if as_bytes(k).startswith(b"o:")) >= 1_000

    server[0].kill()  # kill -9
    server[0].wait(10)
    down = [await call(calls, BEFORE + i) for i in range(DOWN_AFTER + 5)]
    # Each of the first down_after tasks found no server (its retries too: one task); from
    # then on the circuit is open and no call reaches the port.
    reached = [r for r in down if any(a.outcome == "transient" for a in r.attempts)]
    assert len(reached) == DOWN_AFTER, [[a.outcome for a in r.attempts] for r in down]
    assert {r.reason for r in down[DOWN_AFTER:]} == {"circuit_open"}
    assert await runtime.breaker.state() is BreakerState.OPEN

    server.append(_serve(port))  # back, on the same port

    async def answered() -> ModelReply | None:
        reply = await call(calls, 0)
        return None if reply.degraded else reply

    await eventually(answered, timeout=60, what="a call answered after the outage")
    assert await runtime.breaker.state() is BreakerState.CLOSED
    after = await asyncio.gather(*(call(calls, 10_000 + i) for i in range(50)))
    assert not any(r.degraded for r in after)
