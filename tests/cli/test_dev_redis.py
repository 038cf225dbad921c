"""``deepagents dev-redis``: the throwaway Redis the README's first agent runs against."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import redis

from deepagents._internal.redis_server import free_port

DEEPAGENTS = str(Path(sys.executable).parent / "deepagents")


def test_it_serves_a_redis_workers_accept_and_stops_on_a_signal() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [DEEPAGENTS, "dev-redis", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == f"export DEEPAGENTS_REDIS_URL=redis://127.0.0.1:{port}/0"
        client = redis.Redis.from_url(line.split("=", 1)[1])
        try:
            assert client.ping()
            # what workers and the gateway check at start (docs/design.md)
            assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        finally:
            client.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()  # closes both pipes
    refused = redis.Redis(port=port, socket_connect_timeout=1)
    try:
        try:
            refused.ping()
        except redis.ConnectionError:
            pass
        else:
            raise AssertionError("the server outlived the command")
    finally:
        refused.close()


def test_a_port_in_use_is_one_line(redis_url: str) -> None:
    port = redis.Redis.from_url(redis_url).connection_pool.connection_kwargs["port"]
    done = subprocess.run(
        [DEEPAGENTS, "dev-redis", "--port", str(port)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("deepagents: error: --port: ") and "in use" in done.stderr
