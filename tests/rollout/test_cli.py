"""``deepagents rollout``: each action through the real CLI on Redis, and bad input as one
line with a non-zero exit code."""

from __future__ import annotations

from pathlib import Path

import orjson
from redis.asyncio import Redis

from deepagents.config import Settings
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator
from tests.rollout.agents import NAME, StableAgent
from tests.rollout.conftest import (
    processes,
    rollout_config,
    rollout_events,
    stream_lengths,
    write_config,
)


async def test_start_weight_promote_and_rollback_through_the_cli(
    client: Redis, settings: Settings, prefix: str, redis_url: str, tmp_path: Path
) -> None:
    config = rollout_config(canary=None, steps=[0.3, 1.0])
    path = write_config(tmp_path / "deepagents.yaml", config)
    with processes(redis_url, prefix, path) as procs:

        def rollout(*args: str) -> dict[str, object]:
            done = procs.run("rollout", *args, NAME, "--json")
            assert done.returncode == 0, done.stderr
            state: dict[str, object] = orjson.loads(done.stdout)["rollout"]
            return state

        assert rollout("status")["phase"] == "stable"
        started = rollout("start", "--canary", "1.3.0", "--weight", "0.1")
        assert (started["canary"], started["weight"], started["phase"]) == ("1.3.0", 0.1, "canary")
        assert rollout("set-weight", "0.6")["weight"] == 0.6
        async with Orchestrator.from_client(
            client, config=config, settings=settings, agents=[StableAgent]
        ) as orch:
            await orch.submit_many([Task(intent="canaried", payload={}) for _ in range(300)])
        queued = await stream_lengths(client, prefix, config)
        assert queued["1.3.0"] > 100  # no worker has read them: all unstarted
        back = rollout("rollback", "--reason", "by hand")
        assert (back["phase"], back["weight"], back["canary"]) == ("rolled_back", 0.0, None)
        after = await stream_lengths(client, prefix, config)
        assert after == {"": 0, "1.2.0": 300, "1.3.0": 0}
        status = procs.run("status", "--json")
        assert status.returncode == 0, status.stderr
        rows = [orjson.loads(line) for line in status.stdout.splitlines() if line.strip()]
        flat = [r for row in rows for r in (row if isinstance(row, list) else [row])]
        versioned = [r for r in flat if isinstance(r, dict) and r.get("version") == "1.2.0"]
        assert sum(r["length"] for r in versioned) == 300, status.stdout[:2000]
        again = rollout("start", "--canary", "1.4.0")
        assert again["weight"] == 0.2  # the configured weight
        assert rollout("promote")["weight"] == 0.3
        done = rollout("promote")
        assert (done["stable"], done["canary"], done["phase"]) == ("1.4.0", None, "promoted")
    decisions = [e["decision"] for e in await rollout_events(client, prefix)]
    assert decisions == ["start", "set_weight", "rollback", "start", "promote", "complete"]


async def test_bad_input_is_one_line(
    client: Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    path = write_config(tmp_path / "deepagents.yaml", rollout_config())
    with processes(redis_url, prefix, path) as procs:
        cases = [
            (("rollout", "status", "nope"), "agent 'nope' has no rollouts.nope section"),
            (("rollout", "set-weight", "1.5", NAME), "1.5 is not between 0 and 1"),
            (("rollout", "start", NAME, "--canary", "1.2.0"), "canary 1.2.0 is the stable version"),
            (("rollout", "start", NAME, "--canary", "a:b"), "version 'a:b' must match"),
            (("rollout-controller", "--interval", "0"), "0 must be above 0"),
        ]
        damaged = (("rollout", "status", NAME), f"{prefix}:rollout:{NAME} does not hold a rollout")
        for args, message in [*cases, damaged]:
            if args is damaged[0]:  # a state that is not a rollout document
                await client.hset(f"{prefix}:rollout:{NAME}", mapping={"doc": "{no", "rev": 3})
            done = procs.run(*args)
            assert done.returncode != 0, args
            lines = done.stderr.strip().splitlines()
            assert message in lines[-1], done.stderr
            assert not any("Traceback" in line for line in lines), done.stderr
