"""Submit-and-wait load against the deepagents gateway.

Each request is ``POST /v1/tasks?wait=S``: the gateway enqueues the task and answers
with the result when it is done (one HTTP round trip per task). Statistics are named
per tier, so locust reports throughput and p50/p95/p99 per tier.

Environment:
    DEEPAGENTS_BENCH_KEY   the API key (required)
    DEEPAGENTS_BENCH_MIX   ``echo`` (the benchmark: echo agent only) or ``mixed`` (urgent
                           trades p0, normal trades p1, research and risk checks p2)
    DEEPAGENTS_BENCH_WAIT  seconds to wait for each result (default 10)

Run by ``loadtests/run_gateway_bench.sh``, which starts Redis, the gateway and workers.
"""

from __future__ import annotations

import os
import random
from typing import Any

from locust import FastHttpUser, constant, task

KEY = os.environ.get("DEEPAGENTS_BENCH_KEY", "")
MIX = os.environ.get("DEEPAGENTS_BENCH_MIX", "echo")
WAIT = float(os.environ.get("DEEPAGENTS_BENCH_WAIT", "10"))


class SubmitAndWait(FastHttpUser):
    wait_time = constant(0)

    def on_start(self) -> None:
        self.headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}

    def _run(self, name: str, body: dict[str, Any]) -> None:
        with self.client.post(
            f"/v1/tasks?wait={WAIT}",
            json=body,
            headers=self.headers,
            name=name,
            catch_response=True,
        ) as response:
            if response.status_code != 200:
                response.failure(f"{response.status_code}: {response.text[:200]}")
            elif response.json().get("state") != "done":
                response.failure("no result within the wait")

    @task
    def work(self) -> None:
        if MIX == "echo":
            self._run("p2 echo", {"intent": "echo", "payload": {"n": random.random()}})
            return
        roll = random.random()
        symbol = random.choice(["IF", "IC", "IH", "RB"])
        if roll < 0.15:
            self._run(
                "p0 urgent trade", {"intent": "trade", "payload": _trade(symbol, urgent=True)}
            )
        elif roll < 0.55:
            self._run("p1 trade", {"intent": "trade", "payload": _trade(symbol, urgent=False)})
        elif roll < 0.85:
            self._run(
                "p2 risk_check", {"intent": "risk_check", "payload": _trade(symbol, urgent=False)}
            )
        else:
            self._run(
                "p2 research",
                {"intent": "research", "payload": {"topic": symbol, "simulated_latency_ms": 5}},
            )


def _trade(symbol: str, *, urgent: bool) -> dict[str, Any]:
    return {
        "symbol": symbol,
        "side": random.choice(["buy", "sell"]),
        "quantity": random.randint(1, 10),
        "price": round(random.uniform(10, 500), 2),
        "available_funds": 10_000_000,
        "urgent": urgent,
    }
