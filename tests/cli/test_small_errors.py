"""Issue 24 item 7: small errors made consistent, each through the real CLI."""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Iterator

import orjson
import pytest
from redis.asyncio import Redis

from deepagents._internal.redis_server import free_port
from tests.cli.support import CONFIG, clean_env, deepagents, one_line_error
from tests.support.procs import Procs
from tests.support.wait import eventually_sync


@pytest.fixture
def env(redis_url: str, prefix: str, client: Redis) -> dict[str, str]:
    # `client` deletes the prefix's keys afterwards
    return clean_env(
        DEEPAGENTS_REDIS_URL=redis_url, DEEPAGENTS_PREFIX=prefix, DEEPAGENTS_CONFIG=str(CONFIG)
    )


async def _keys(client: Redis, prefix: str) -> list[bytes]:
    return [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]


@pytest.mark.parametrize("wait", ["-1", "0"])
async def test_a_bad_wait_is_refused_before_enqueueing(
    env: dict[str, str], client: Redis, prefix: str, wait: str
) -> None:
    args = ("publish", "--intent", "echo", "--wait", wait)
    done = await asyncio.to_thread(deepagents, *args, env=env)
    one_line_error(done, 2, "--wait must be a positive number of seconds")
    assert await _keys(client, prefix) == []  # nothing was enqueued


@pytest.mark.parametrize(
    "args", [("show", "nosuch"), ("replay", "nosuch"), ("purge", "nosuch", "1-0")]
)
def test_a_malformed_dead_letter_id_is_named(env: dict[str, str], args: tuple[str, ...]) -> None:
    done = deepagents("dlq", *args, env=env)
    one_line_error(done, 2, "'nosuch' is not a dead-letter id", "deepagents dlq list")


def test_purge_prints_a_line_unless_asked_for_json(env: dict[str, str]) -> None:
    done = deepagents("dlq", "purge", "--yes", env=env)
    assert (done.returncode, done.stdout) == (0, "purged 0 dead letter(s)\n"), done.stderr
    done = deepagents("dlq", "purge", "--yes", "--json", env=env)
    assert orjson.loads(done.stdout) == {"purged": 0}


@pytest.fixture
def simulator(env: dict[str, str]) -> Iterator[tuple[Procs, str]]:
    procs = Procs(env)
    try:
        port = free_port()
        procs.cli("sim-model", "--port", str(port))

        def listening() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
            except OSError:
                return False
            return True

        eventually_sync(listening, timeout=30, what="the model simulator")
        yield procs, f"http://127.0.0.1:{port}/v1"
    finally:
        procs.close()


def test_a_model_call_logs_no_httpx_line(simulator: tuple[Procs, str], env: dict[str, str]) -> None:
    procs, url = simulator
    worker = procs.worker("agents.research:ResearchAgent", env={"DEEPAGENTS_SIM_MODEL_URL": url})
    payload = orjson.dumps({"topic": "t", "text": "basis widened as rates rose"}).decode()
    args = ("publish", "--intent", "research", "--payload", payload, "--wait", "60")
    done = deepagents(*args, env=env, timeout=90)
    assert done.returncode == 0, done.stderr
    result = orjson.loads(done.stdout)
    assert result["status"] == "success" and not result["degraded"], result  # a model answered
    assert "HTTP Request" not in procs.output(worker)


def test_a_wait_that_times_out_names_the_agent_no_worker_serves(env: dict[str, str]) -> None:
    done = deepagents("publish", "--intent", "echo", "--payload", "{}", "--wait", "1", env=env)
    lines = done.stderr.splitlines()
    assert done.returncode == 1, done.stderr
    said = "no live worker serves agent 'echo': its tasks wait until one starts"
    assert f"deepagents: publish: {said}" in lines, done.stderr
    assert lines[-1].startswith("deepagents: error: task ") and "no result after 1" in lines[-1]


def test_a_worker_for_an_agent_the_config_does_not_name_says_so_once(
    env: dict[str, str],
) -> None:
    procs = Procs(env)
    try:
        worker = procs.worker("tests.agents:LabAgent", "--processes", "2")
        eventually_sync(
            lambda: procs.log(worker).count('"worker started"') == 2,
            timeout=60,
            what="two forked workers started",
        )
        warnings = [
            orjson.loads(line)
            for line in procs.log(worker).splitlines()
            if '"agent_not_configured"' in line
        ]
    finally:
        # Stopped as an operator would: the supervisor stops its children and waits for
        # them. (Killed with -9, its children would notice only later, and write after
        # `client` deleted the test's keys.)
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
        procs.close()
    assert [(w["level"], w["agent"]) for w in warnings] == [("warning", "lab")]
    assert warnings[0]["msg"].startswith("agent 'lab' (tests.agents.LabAgent) has no entry")
