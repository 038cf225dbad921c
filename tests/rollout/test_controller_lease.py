"""The controller's lease, with two ``deepagents rollout-controller`` processes: exactly one
acts (every promotion is by the lease's holder), and after ``kill -9`` of that one the other
takes the lease within its TTL and goes on promoting."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from redis.asyncio import Redis

from deepagents.store.rollouts import RedisRollouts
from deepagents.transport.keys import Keys
from tests.rollout.agents import NAME
from tests.rollout.conftest import processes, rollout_config, rollout_events, write_config
from tests.support.replies import as_bytes
from tests.support.wait import eventually

TTL_S = 2.0
STEPS = [round(0.11 + i / 100, 2) for i in range(89)] + [1.0]  # many small steps


async def test_one_controller_acts_and_the_other_takes_over_after_kill_9(
    client: Redis, prefix: str, redis_url: str, tmp_path: Path
) -> None:
    config = rollout_config(weight=0.1, steps=STEPS, step_s=0.3, window_s=120, min_samples=10)
    path = write_config(tmp_path / "deepagents.yaml", config)
    healthy = {"n": 100, "h2": 100}  # 100 tasks each, no errors, all within 50 ms
    bucket = int(time.time()) // 5 * 5
    for version in ("1.2.0", "1.3.0"):
        await RedisRollouts(client, Keys(prefix)).record(NAME, version, {bucket: healthy})
    lease_key = f"{prefix}:rollout:lease"

    async def promotions() -> list[str]:
        return [e["by"] for e in await rollout_events(client, prefix) if e["decision"] == "promote"]

    with processes(redis_url, prefix, path) as procs:
        args = ("rollout-controller", "--interval", "0.2", "--lease-ttl", str(TTL_S))
        ctl = {name: procs.cli(*args, "--id", name) for name in ("ctl-a", "ctl-b")}

        async def promoted_a_few() -> bool:
            return len(await promotions()) >= 3

        await eventually(promoted_a_few, timeout=60, what="three promotions")
        leader = as_bytes(await client.get(lease_key)).decode()
        assert leader in ctl
        before = await promotions()
        assert set(before) == {f"controller:{leader}"}, before  # exactly one acts

        ctl[leader].send_signal(signal.SIGKILL)
        ctl[leader].wait(timeout=10)
        killed = time.monotonic()
        other = next(name for name in ctl if name != leader)

        async def taken_over() -> bool:
            return await client.get(lease_key) == other.encode()

        await eventually(taken_over, timeout=30, what="the other controller taking the lease")
        took_s = time.monotonic() - killed
        # The lease outlives its dead holder by at most one TTL; the survivor tries every
        # 0.2 s. The slack is for this loaded machine's scheduling, not the protocol.
        assert took_s <= TTL_S + 3, took_s

        async def promoted_again() -> bool:
            return len(await promotions()) >= len(before) + 2

        await eventually(promoted_again, timeout=60, what="promotions by the survivor")
    after = (await promotions())[len(before) :]
    assert set(after) <= {f"controller:{leader}", f"controller:{other}"}
    assert after[-1] == f"controller:{other}"
    # The dead leader's last tick may have landed just before the kill; none after.
    assert after.count(f"controller:{leader}") <= 1
