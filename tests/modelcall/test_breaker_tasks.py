"""The shared breaker (``store/breaker.py``) on the real Redis, one rule at a time: a
task's failures count once in the window; distinct tasks finding the service down, with
no success between, open it at once whatever the window holds, and a success ends that
streak; a task's own retries do not lengthen it; the fields of tasks past the window are
swept."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis

from deepagents.config.models import BreakerConfig
from deepagents.store.breaker import BreakerState, CircuitBreaker, Keyed
from tests.support.replies import as_bytes
from tests.support.wait import eventually


def breaker(client: Redis, prefix: str, **config: float) -> CircuitBreaker:
    keys = Keyed(f"{prefix}:{{b}}:cb", f"{prefix}:{{b}}:cb:win")
    settings = {"min_calls": 3, "failure_rate": 0.5, "state_cache_s": 0, **config}
    return CircuitBreaker(client, keys, BreakerConfig.model_validate(settings))


async def test_one_tasks_failures_count_once_and_many_tasks_open_it(
    client: Redis, prefix: str
) -> None:
    b = breaker(client, prefix)
    for _ in range(10):  # one task, failing again and again, alone
        assert await b.record(False, probe=False, task="poison") is BreakerState.CLOSED
    for _ in range(3):
        assert await b.record(True, probe=False) is BreakerState.CLOSED
    assert await b.record(False, probe=False, task="t2") is BreakerState.CLOSED  # 2 of 5
    # a third failing task: 3 of 6 outcomes (3 tasks, 3 successes) are failing tasks
    assert await b.record(False, probe=False, task="t3") is BreakerState.OPEN


async def test_a_streak_of_down_tasks_opens_it_whatever_the_window_holds(
    client: Redis, prefix: str
) -> None:
    b = breaker(client, prefix, down_after=3)
    for _ in range(1_000):
        b.note_success()
    await b.flush()
    down = {"probe": False, "down": True}
    assert await b.record(False, task="a", **down) is BreakerState.CLOSED
    assert await b.record(False, task="a", **down) is BreakerState.CLOSED  # its own retry
    assert await b.record(False, task="b", **down) is BreakerState.CLOSED
    assert await b.record(True, probe=False) is BreakerState.CLOSED  # an answer: streak over
    assert await b.record(False, task="c", **down) is BreakerState.CLOSED
    assert await b.record(False, task="a", **down) is BreakerState.CLOSED  # a new streak
    assert await b.record(False, task="d", **down) is BreakerState.OPEN
    # a failure that is not "down" (a 500) never feeds the streak
    other = breaker(client, f"{prefix}:x", down_after=2)
    for task in "pqr":
        for _ in range(2):
            await other.record(True, probe=False)
        assert await other.record(False, probe=False, task=task) is BreakerState.CLOSED


async def test_fields_of_tasks_past_the_window_are_swept(client: Redis, prefix: str) -> None:
    b = breaker(client, prefix, window_s=0.3, min_calls=10_000)  # never opens: only the sweep
    window = f"{prefix}:{{b}}:cb:win"
    for i in range(40):
        await b.record(False, probe=False, task=f"old-{i}")

    async def swept() -> bool:
        await b.record(False, probe=False, task="new")  # each failure sweeps a few fields
        names = [as_bytes(k) for k in await client.hkeys(window)]
        return not any(n.startswith(b"t:old-") for n in names)

    await eventually(swept, timeout=30, what="the old tasks' fields swept")


async def test_calls_arriving_together_share_one_read_of_a_closed_state(
    client: Redis, prefix: str
) -> None:
    """With the cached 'closed' run out, the calls arriving while one reads the state share
    that read; an open state each reads for itself (each is refused with its own wait), and
    a half-open one gives one probe, however many arrive together."""
    b = breaker(client, prefix, cooldown_s=0.2)
    reads = 0
    allow = b._allow

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return await allow(*args, **kwargs)

    b._allow = counted  # type: ignore[assignment]
    permits = await asyncio.gather(*(b.allow(probe_ttl_s=5) for _ in range(50)))
    assert all(p.allowed and not p.probe for p in permits)
    assert reads == 1
    for task in "abc":
        await b.record(False, probe=False, task=task)
    reads = 0
    permits = await asyncio.gather(*(b.allow(probe_ttl_s=5) for _ in range(20)))
    assert not any(p.allowed for p in permits)
    assert reads == 20

    opened_ms = int(as_bytes(await client.hget(f"{prefix}:{{b}}:cb", "opened_at")))

    async def cooled_down() -> bool:
        seconds, micros = await client.time()
        return seconds * 1000 + micros // 1000 >= opened_ms + 200

    await eventually(cooled_down, what="the cool-down over")
    permits = await asyncio.gather(*(b.allow(probe_ttl_s=5) for _ in range(20)))
    assert sum(p.probe for p in permits) == 1
    assert not any(p.allowed and not p.probe for p in permits)
