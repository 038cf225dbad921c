"""A worker's ``/metrics`` listens on loopback unless told otherwise (issue 16, finding 9):
it showed agent names, tiers and counts to every host that could reach it. A host it
cannot listen on is one line and exit code 2."""

from __future__ import annotations

import functools
import socket

from redis.asyncio import Redis

from tests.support.procs import Procs
from tests.support.wait import eventually
from tests.telemetry.support import free_port, try_scrape


def _listening_on(port: int) -> set[str]:
    """The IPv4 addresses a socket listens on at ``port`` on this host (/proc/net/tcp)."""
    found = set()
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(socket.inet_ntoa(bytes.fromhex(addr)[::-1]))
    return found


async def _serving(port: int) -> bool:
    return bool(try_scrape(port))


async def test_metrics_listen_on_loopback_by_default_and_where_asked(
    procs: Procs, client: Redis
) -> None:
    default, everywhere = free_port(), free_port()
    procs.worker("agents.echo:EchoAgent", "--metrics-port", str(default))
    procs.worker("agents.echo:EchoAgent", "--metrics-port", str(everywhere),
                 env={"DEEPAGENTS_METRICS_HOST": "0.0.0.0"})  # fmt: skip
    for port in (default, everywhere):
        await eventually(functools.partial(_serving, port), what=f"/metrics on {port}")
    assert _listening_on(default) == {"127.0.0.1"}
    assert _listening_on(everywhere) == {"0.0.0.0"}


def test_a_host_it_cannot_listen_on_is_one_line(procs: Procs) -> None:
    # 192.0.2.1 (TEST-NET-1) is no address of this host.
    run = procs.run("worker", "agents.echo:EchoAgent", "--metrics-port", str(free_port()),
                    "--metrics-host", "192.0.2.1")  # fmt: skip
    assert run.returncode == 2, run.stderr
    # One line for the error (log lines before it, such as the warning that this config
    # does not name the agent's class, are not the error's).
    (line,) = [ln for ln in run.stderr.splitlines() if ln.startswith("deepagents: ")]
    assert line.startswith("deepagents: error: cannot serve /metrics on 192.0.2.1 port"), line
