"""Pull mode through a real worker process: a puller process leases and completes tasks;
one killed with -9 while holding leases has its tasks retried and committed once; bad
completions are refused one by one, each affecting its own task only."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from agents.risk import Order, margin_for
from deepagents.config import FileConfig, Settings, load_config
from deepagents.config.schema import AgentEntry
from deepagents.contract import Result, ResultStatus, Task
from deepagents.contract.task import utcnow
from deepagents.errors import RemoteProtocolError
from deepagents.orchestrator import Orchestrator
from deepagents.remote import remote_agent_class
from deepagents.remote.errors import ServiceUnreachable
from tests.e2e.conftest import assert_committed_once, committed_events, registered, worker_procs
from tests.support.procs import Procs
from tests.support.wait import eventually, eventually_sync

pytestmark = pytest.mark.timeout(120)
TOKEN = "pull-token-for-tests-0123456789"
AUTH = {"authorization": f"Bearer {TOKEN}"}
PULLER = "agents.remote.python.risk_puller"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def pull_config(port: int, lease_s: float, max_deliveries: int = 5) -> str:
    return f"""
tiers:
  p0: {{concurrency: 20, max_wait_ms: 60000}}
default_tier: p0
defaults:
  shards: 2
  max_deliveries: {max_deliveries}
  visibility_timeout_ms: 1000
  block_ms: 200
  grace_period_s: 5
  retry: {{base_ms: 50, max_ms: 200}}
agents:
  risk-pull:
    intents: [risk_check]
    remote:
      mode: pull
      timeout_s: 20
      breaker: {{cooldown_s: 0.5}}
      pull: {{listen: "127.0.0.1:{port}", token_from_env: TEST_PULL_TOKEN, lease_s: {lease_s}}}
"""


def order(i: int) -> dict[str, object]:
    return {"symbol": "IF", "side": "buy", "quantity": 1 + i, "price": f"{3000 + i}.5",
            "available_funds": "5000000.00"}  # fmt: skip


class Pull:
    """A worker in pull mode (its endpoint's URL) and the processes of the test."""

    def __init__(self, procs: Procs, path: Path, port: int) -> None:
        self.procs, self.path = procs, path
        self.url = f"http://127.0.0.1:{port}"

    def puller(self, *extra: str) -> subprocess.Popen[bytes]:
        env = {"DEEPAGENTS_PULL_TOKEN": TOKEN}
        return self.procs.cli_module(PULLER, "--worker", self.url, *extra, env=env)


@pytest.fixture
def pull_worker(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str, prefix: str
) -> Iterator[Pull]:
    """A worker of ``risk-pull`` in pull mode (``lease_s``: the fixture's parameter,
    default 5), serving its lease calls on a free port."""
    lease_s = float(getattr(request, "param", 5.0))
    port = free_port()
    path = tmp_path / "config.yaml"
    path.write_text(pull_config(port, lease_s))
    procs = worker_procs(redis_url, prefix, path, TEST_PULL_TOKEN=TOKEN)
    try:
        procs.cli("worker", "--remote", "risk-pull")
        yield Pull(procs, path, port)
    finally:
        procs.close()


async def _results(orch: Orchestrator, n: int) -> tuple[list[str], list[object]]:
    handles = await orch.submit_many(
        [Task(intent="risk_check", payload=order(i)) for i in range(n)]
    )
    results = await asyncio.gather(*(h.result(timeout=90) for h in handles))
    return [h.task_id for h in handles], list(results)


async def test_a_puller_leases_and_completes_tasks_through_a_real_worker(
    pull_worker: Pull, client: Redis, prefix: str, settings: Settings
) -> None:
    await registered(client, prefix, "risk-pull", 1)
    pull_worker.puller("--max-tasks", "8", "--wait-ms", "500")
    async with Orchestrator.from_client(
        client, config=load_config(pull_worker.path), settings=settings
    ) as orch:
        ids, results = await _results(orch, 30)
    for i, result in enumerate(results):
        assert result.status is ResultStatus.SUCCESS, result  # type: ignore[attr-defined]
        margin = margin_for(Order.model_validate(order(i))).quantize(Decimal("0.01"))
        assert result.output["margin"] == str(margin)  # type: ignore[attr-defined]
    assert_committed_once(await committed_events(client, prefix, "risk-pull", 2), ids)


@pytest.mark.parametrize("pull_worker", [1.0], indirect=True, ids=["lease_1s"])
async def test_a_puller_killed_holding_leases_has_its_tasks_retried_and_committed_once(
    pull_worker: Pull, client: Redis, prefix: str, settings: Settings, tmp_path: Path
) -> None:
    await registered(client, prefix, "risk-pull", 1)
    held = tmp_path / "held.jsonl"
    victim = pull_worker.puller("--max-tasks", "4", "--hold-ms", "600000", "--log", str(held))
    async with Orchestrator.from_client(
        client, config=load_config(pull_worker.path), settings=settings
    ) as orch:
        handles = await orch.submit_many(
            [Task(intent="risk_check", payload=order(i)) for i in range(6)]
        )
        eventually_sync(lambda: held.exists() and held.read_text().count("\n") >= 4,
                        what="the victim holding leases")  # fmt: skip
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        pull_worker.puller("--max-tasks", "8", "--wait-ms", "500")
        results = await asyncio.gather(*(h.result(timeout=90) for h in handles))
    assert all(r.status is ResultStatus.SUCCESS for r in results), results
    ids = [h.task_id for h in handles]
    assert_committed_once(await committed_events(client, prefix, "risk-pull", 2), ids)
    leases = [orjson.loads(line) for line in held.read_text().splitlines()]
    # The victim's leases are gone with it: a completion of one is refused, not committed.
    late = {"lease": leases[0]["lease"], "id": leases[0]["task"],
            "result": {"status": "success", "output": {"late": True}}}  # fmt: skip
    answer = httpx.post(f"{pull_worker.url}/v1/complete", json={"answers": [late]}, headers=AUTH)
    outcome = answer.json()["outcomes"][0]
    assert outcome["accepted"] is False
    assert outcome["problem"]["status"] == 409
    assert "no longer held" in outcome["problem"]["title"]


@pytest.mark.parametrize("pull_worker", [1.0], indirect=True, ids=["lease_1s"])
async def test_bad_completions_are_errors_of_their_own_task_only(
    pull_worker: Pull, client: Redis, prefix: str, settings: Settings
) -> None:
    await registered(client, prefix, "risk-pull", 1)
    http = httpx.AsyncClient(base_url=pull_worker.url, timeout=30)
    try:
        # No token, or another one: refused before anything is read.
        for headers in ({}, {"authorization": "Bearer not-the-token"}):
            refused = await http.post("/v1/lease", json={"max_tasks": 1}, headers=headers)
            assert refused.status_code == 401
            assert refused.headers["content-type"].startswith("application/problem+json")
        bad = await http.post("/v1/lease", json={"max_tasks": "many"}, headers=AUTH)
        assert bad.status_code == 400 and "max_tasks" in bad.json()["detail"]

        async with Orchestrator.from_client(
            client, config=load_config(pull_worker.path), settings=settings
        ) as orch:
            handles = await orch.submit_many(
                [Task(intent="risk_check", payload=order(i)) for i in range(5)]
            )
            leased: dict[str, dict[str, object]] = {}

            async def all_leased() -> bool:
                answer = await http.post(
                    "/v1/lease", json={"max_tasks": 5, "wait_ms": 200}, headers=AUTH
                )
                for task in answer.json()["tasks"]:
                    leased[task["task"]["id"]] = task
                return len(leased) == 5

            await eventually(all_leased, timeout=60, what="5 tasks leased")
            a, b, c, d, e = (leased[h.task_id] for h in handles)

            def good(t: dict[str, object]) -> dict[str, object]:
                task = t["task"]
                assert isinstance(task, dict)
                return {"lease": t["lease"], "id": task["id"],
                        "result": {"status": "success", "output": {"ok": task["id"]}}}  # fmt: skip

            malformed_body = await http.post("/v1/complete", content=b"{nope", headers=AUTH)
            assert malformed_body.status_code == 400
            answers = [
                {**good(a), "lease": "no-such-lease"},  # unknown: a's lease still held
                {**good(b), "id": a["task"]["id"]},  # type: ignore[index]  # another task's id
                {**good(c), "result": {"status": "maybe"}},  # malformed
                good(d),
                {"id": "x"},  # no lease at all
            ]
            outcomes = (await http.post("/v1/complete", json={"answers": answers},
                                        headers=AUTH)).json()["outcomes"]  # fmt: skip
            assert [o["accepted"] for o in outcomes] == [False, False, False, True, False]
            assert [o["problem"]["status"] for o in outcomes if o.get("problem")] == [
                404, 422, 422, 400]  # fmt: skip
            assert "lease is for task" in outcomes[1]["problem"]["detail"]
            assert "status" in outcomes[2]["problem"]["detail"]
            # a was not touched: it answers now, on its own lease.
            ok = await http.post("/v1/complete", json={"answers": [good(a)]}, headers=AUTH)
            assert ok.json()["outcomes"][0]["accepted"] is True
            # e's lease runs out (1 s): the task is leased again as attempt 2, and the
            # old lease's completion is refused.
            again: list[dict[str, object]] = []

            async def e_back() -> bool:
                answer = await http.post(
                    "/v1/lease", json={"max_tasks": 5, "wait_ms": 500}, headers=AUTH
                )
                again.extend(answer.json()["tasks"])
                return bool(again)

            await eventually(e_back, timeout=60, what="the expired task leased again")
            assert [t["task"]["id"] for t in again] == [e["task"]["id"]]  # type: ignore[index]
            assert again[0]["attempt"] == 2
            late = await http.post("/v1/complete", json={"answers": [good(e)]}, headers=AUTH)
            assert late.json()["outcomes"][0]["problem"]["status"] == 409
            ok = await http.post("/v1/complete", json={"answers": [good(again[0])]}, headers=AUTH)
            assert ok.json()["outcomes"][0]["accepted"] is True
            results = await asyncio.gather(*(h.result(timeout=60) for h in handles))
    finally:
        await http.aclose()
    statuses = [r.status for r in results]
    assert statuses == [ResultStatus.SUCCESS, ResultStatus.FAILED, ResultStatus.FAILED,
                        ResultStatus.SUCCESS, ResultStatus.SUCCESS]  # fmt: skip
    for failed in (results[1], results[2]):
        assert failed.error is not None and failed.error.code == "remote_protocol_error"
    assert results[0].output == {"ok": handles[0].task_id}
    ids = [h.task_id for h in handles]
    assert_committed_once(await committed_events(client, prefix, "risk-pull", 2), ids)


async def test_an_unleased_task_finds_the_service_down_a_leased_one_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_PULL_TOKEN", TOKEN)
    port = free_port()
    pull = {"listen": f"127.0.0.1:{port}", "token_from_env": "TEST_PULL_TOKEN"}
    entry = FileConfig.model_validate(
        {"agents": {"risk-p": {"intents": ["risk_check"], "remote": {"mode": "pull",
                                                                    "timeout_s": 0.2,
                                                                    "pull": pull}}}}
    ).agents["risk-p"]  # fmt: skip
    assert isinstance(entry, AgentEntry)
    agent = remote_agent_class("risk-p", entry)()
    await agent.introduce()
    try:
        # Nobody pulls: the call ends as a service that is not there (the breaker counts it).
        task = Task(intent="risk_check", payload=order(0))
        assert await agent.can_handle(task)
        with pytest.raises(ServiceUnreachable, match=r"no puller leased the task within 0\.2 s"):
            await agent.execute(await agent.prepare_context(task))
        async with httpx.AsyncClient() as http:
            answer = await http.post(
                f"http://127.0.0.1:{port}/v1/lease",
                json={"max_tasks": 1, "wait_ms": 0, "version": "2.1.0"},
                headers=AUTH,
            )
            assert answer.json() == {"tasks": []}  # the given-up task is not handed out
            assert await agent.health_check()
            assert agent.version == "2.1.0"
            # A task with a deadline: its lease ends by then, and it is told the time left.
            soon = Task(
                intent="risk_check", payload=order(1), deadline=utcnow() + timedelta(seconds=5)
            )
            assert await agent.can_handle(soon)
            running = asyncio.ensure_future(agent.execute(await agent.prepare_context(soon)))
            leased = await http.post(
                f"http://127.0.0.1:{port}/v1/lease",
                json={"max_tasks": 4, "wait_ms": 5000},
                headers=AUTH,
            )
            (one,) = leased.json()["tasks"]
            assert one["task"]["id"] == soon.task_id and one["attempt"] == 1
            assert 0 < one["lease_ms"] <= one["time_left_ms"] <= 5000
            done = {"lease": one["lease"], "id": soon.task_id,
                    "result": {"status": "success", "output": {"pulled": True}}}  # fmt: skip
            await http.post(
                f"http://127.0.0.1:{port}/v1/complete", json={"answers": [done]}, headers=AUTH
            )
            result = await running
        assert result.status is ResultStatus.SUCCESS and result.output == {"pulled": True}
    finally:
        await agent.aclose()


@pytest.mark.parametrize(
    ("hostile", "said"),
    [
        (b'"score":NaN', "NaN"),  # JSON has none; the strict read refuses it
        # A lone surrogate's escape: the strict read takes it, no JSON encoding holds it.
        (b'"score":1,"\\ud800":2', "surrogates"),
    ],
)
async def test_a_value_refused_in_one_completion_fails_that_task_only(
    monkeypatch: pytest.MonkeyPatch, hostile: bytes, said: str
) -> None:
    """One answer of a completion holds a value no result can keep: that answer is refused
    and its task fails as a protocol error, while the other answers of the same request
    are accepted."""
    monkeypatch.setenv("TEST_PULL_TOKEN", TOKEN)
    port = free_port()
    pull = {"listen": f"127.0.0.1:{port}", "token_from_env": "TEST_PULL_TOKEN"}
    entry = FileConfig.model_validate(
        {"agents": {"risk-p": {"intents": ["risk_check"], "remote": {"mode": "pull",
                                                                    "pull": pull}}}}
    ).agents["risk-p"]  # fmt: skip
    assert isinstance(entry, AgentEntry)
    agent = remote_agent_class("risk-p", entry)()
    await agent.introduce()

    async def run(task: Task) -> object:
        assert await agent.can_handle(task)
        return await agent.execute(await agent.prepare_context(task))

    try:
        tasks = [Task(intent="risk_check", payload=order(i)) for i in range(3)]
        running = [asyncio.ensure_future(run(t)) for t in tasks]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            leased: list[dict[str, object]] = []

            async def all_leased() -> bool:
                answer = await http.post(
                    "/v1/lease", json={"max_tasks": 3, "wait_ms": 200}, headers=AUTH
                )
                leased.extend(answer.json()["tasks"])
                return len(leased) == 3

            await eventually(all_leased, timeout=30, what="3 tasks leased")
            answers = [
                {"lease": t["lease"], "id": t["task"]["id"],  # type: ignore[index]
                 "result": {"status": "success", "output": {}, "metrics": {"score": i}}}
                for i, t in enumerate(leased)
            ]  # fmt: skip
            body = orjson.dumps({"answers": answers}).replace(b'"score":1', hostile)
            outcomes = (await http.post("/v1/complete", content=body, headers=AUTH)).json()
        assert [o["accepted"] for o in outcomes["outcomes"]] == [True, False, True]
        assert said in outcomes["outcomes"][1]["problem"]["detail"]
        results = await asyncio.gather(*running, return_exceptions=True)
        hostile_task = leased[1]["task"]["id"]  # type: ignore[index]
        for task, result in zip(tasks, results, strict=True):
            if task.task_id == hostile_task:
                assert isinstance(result, RemoteProtocolError) and said in str(result), result
            else:
                assert isinstance(result, Result) and result.ok, result
    finally:
        await agent.aclose()
