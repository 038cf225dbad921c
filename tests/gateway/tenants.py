"""Two tenants at once against one gateway: what tenant A does must not change tenant B's
answers, nor B's median latency beyond a wide factor of its median alone.

Latency is compared as a ratio of medians measured in the same test on the same machine,
never as an absolute time (RELIABILITY: no speed assertions in tests).
"""

from __future__ import annotations

import concurrent.futures as cf
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import orjson

from tests.gateway.procs import ROOT, Gateway, auth

GOOD = {"intent": "echo", "payload": {"x": 1}}


@dataclass
class Run:
    statuses: Counter[int]
    latencies: list[float]

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies) * 1000


def tenant_b(
    gw: Gateway, *, count: int, threads: int = 4, until: threading.Event | None = None
) -> Run:
    """Tenant beta submits good tasks from ``threads`` clients: ``count`` each, and, with
    ``until``, on until it is set (so that B's requests span the whole of A's attack)."""
    statuses: Counter[int] = Counter()
    latencies: list[float] = []
    lock = threading.Lock()

    def client() -> None:
        with httpx.Client(base_url=gw.url, timeout=60, headers=auth("beta")) as http:
            n = 0
            while n < count or (until is not None and not until.is_set()):
                start = time.perf_counter()
                status = http.post("/v1/tasks", json=GOOD).status_code
                took = time.perf_counter() - start
                with lock:
                    statuses[status] += 1
                    latencies.append(took)
                n += 1

    with cf.ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(client) for _ in range(threads)]:
            future.result()
    return Run(statuses, latencies)


def b_under_attack(
    gw: Gateway, attack: Callable[[], Counter[int]], *, count: int
) -> tuple[Run, Counter[int]]:
    """B's run while ``attack`` (tenant A) runs; B goes on until the attack has ended.
    Returns B's run and the attack's status counts."""
    done = threading.Event()
    with cf.ThreadPoolExecutor(1) as pool:
        b = pool.submit(tenant_b, gw, count=count, until=done)
        try:
            a_statuses = attack()
        finally:
            done.set()
        return b.result(), a_statuses


def attack_with(
    gw: Gateway, requests: int, concurrency: int, send: Callable[[httpx.Client], int]
) -> Callable[[], Counter[int]]:
    """Tenant alpha: ``requests`` calls of ``send`` over ``concurrency`` clients."""

    def run() -> Counter[int]:
        statuses: Counter[int] = Counter()
        lock = threading.Lock()
        each = requests // concurrency

        def client() -> None:
            with httpx.Client(base_url=gw.url, timeout=120, headers=auth("alpha")) as http:
                for _ in range(each):
                    status = send(http)
                    with lock:
                        statuses[status] += 1

        with cf.ThreadPoolExecutor(concurrency) as pool:
            for future in [pool.submit(client) for _ in range(concurrency)]:
                future.result()
        return statuses

    return run


def b_during_attack(gw: Gateway, *, connections: int, count: int) -> tuple[Run, Counter[int]]:
    """Beta's run (``count`` per client) while alpha floods the gateway with invalid 1 MiB
    bodies over ``connections`` connections (``alpha_flood``, a process of its own), from
    before beta starts (the gateway has answered alpha once) until beta is done and alpha
    has been refused once. Returns beta's run and alpha's status counts."""
    flood = subprocess.Popen(
        [sys.executable, "-m", "tests.gateway.alpha_flood", gw.url, str(connections)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert flood.stdout is not None and flood.stdout.readline() == b"started\n"
        b = tenant_b(gw, count=count)
        out, _ = flood.communicate(timeout=120)  # closes its stdin: it stops and reports
    finally:
        if flood.poll() is None:
            flood.kill()
            flood.wait()
    return b, Counter({int(k): v for k, v in orjson.loads(out).items()})
