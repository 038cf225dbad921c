"""ctx.ask end to end in one process over the real Redis: a task parks holding no slot, a
reply resumes it once, each on_timeout policy, cancel and deadline while waiting, and a
reply racing the timeout."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.compose import services_for
from deepagents.config import FileConfig, Settings, parse_config
from deepagents.config.placement import Placement
from deepagents.contract.result import Result
from deepagents.contract.task import utcnow
from deepagents.errors import AlreadyReplied, InvalidReply, NotWaiting, ReplyTaskNotFound
from deepagents.orchestrator import Orchestrator, TaskHandle, submitter
from deepagents.orchestrator.fleet import FleetSampler
from deepagents.telemetry.metrics import FleetMetrics
from deepagents.worker import Assignment, Upstream, Worker
from tests.support.asking import CONFIG, ApprovalAgent
from tests.support.replies import entries
from tests.support.wait import eventually
from tests.support.workers import running


@pytest.fixture
def config() -> FileConfig:
    return parse_config(CONFIG)


@pytest.fixture
async def orch(
    client: Redis, config: FileConfig, settings: Settings
) -> AsyncIterator[Orchestrator]:
    async with Orchestrator.from_client(client, config=config, settings=settings) as o:
        yield o


NewWorker = Callable[..., Worker]


@pytest.fixture
def new_worker(
    client: Redis, config: FileConfig, settings: Settings, orch: Orchestrator
) -> NewWorker:
    """A worker of the approver (``placement``: which tiers and shards it reads; all by
    default), for a test to run while it needs one: stopped, nobody takes a task that a
    reply or a timeout queued again."""

    def make(placement: Placement | None = None) -> Worker:
        return Worker.from_client(
            ApprovalAgent(),
            client=client,
            config=config,
            settings=settings,
            assignment=Assignment(placement),
            upstream=Upstream(submitter(orch)),
        )

    return make


@pytest.fixture
async def worker(new_worker: NewWorker) -> AsyncIterator[Worker]:
    async with running(new_worker()) as w:
        yield w


async def _waiting(orch: Orchestrator, handle: TaskHandle) -> dict[str, Any]:
    async def parked() -> dict[str, Any] | None:
        info = await orch.lookup(handle.task_id)
        return info if info and info.get("state") == "waiting" else None

    info = await eventually(parked, timeout=30, what="the task waits for a reply")
    assert info is not None
    return info


async def _submit(orch: Orchestrator, tmp_path: Path, **payload: Any) -> TaskHandle:
    runs = tmp_path / "runs.txt"
    return await orch.submit({"intent": "approve", "payload": {"runs": str(runs), **payload}})


def _runs(tmp_path: Path) -> list[str]:
    path = tmp_path / "runs.txt"
    return path.read_text().splitlines() if path.exists() else []


async def test_a_reply_resumes_the_task_once_with_the_answer(
    orch: Orchestrator, new_worker: NewWorker, client: Redis, settings: Settings, tmp_path: Path
) -> None:
    """The second reply comes while the first one's entry is queued and no worker has taken
    it (the worker that parked the task is stopped): the reply script itself must refuse it,
    not a later check of a running or finished task."""
    metrics = orch.telemetry.metrics  # the process's: other tests count into it too
    assert metrics is not None
    waits = metrics.human_wait.labels("approver", "replied")
    replied_before = sum(waits.counts)
    async with running(new_worker()) as parker:
        handle = await _submit(orch, tmp_path, item="invoice 7")
        info = await _waiting(orch, handle)
    assert info["question"] == "approve invoice 7?"
    question = await orch.question(handle.task_id)
    assert question is not None and question.schema["required"] == ["approved"]
    assert question.on_timeout == "fail" and question.due_ms > question.asked_ms
    (open_,) = await orch.waiting()
    assert open_.task_id == handle.task_id
    with pytest.raises(InvalidReply) as bad:
        await orch.reply(handle.task_id, {"approved": "yes please"})
    assert bad.value.field == "approved"
    with pytest.raises(InvalidReply, match="approved"):
        await orch.reply(handle.task_id, {"note": "no decision"})
    replied = await orch.reply(handle.task_id, {"approved": True, "note": "ok by me"})
    assert replied.ask == "1" and replied.waited_s >= 0
    assert await orch.task_state(handle.task_id) == "queued"  # and nobody to take it
    with pytest.raises(AlreadyReplied):
        await orch.reply(handle.task_id, {"approved": False})
    assert await orch.task_state(handle.task_id) == "queued"
    async with running(new_worker()) as resumer:
        result = await handle.result(timeout=30)
    assert result.output == {"approved": True, "note": "ok by me"}
    with pytest.raises(AlreadyReplied):  # done now, and its question was answered
        await orch.reply(handle.task_id, {"approved": False})
    with pytest.raises(ReplyTaskNotFound):
        await orch.reply("no-such-task", {"approved": False})
    # Ran twice (asked, then resumed with the answer); each step's effect happened once:
    # the resumed run went past the completed step.
    assert [line.split(" ", 1)[1] for line in _runs(tmp_path)] == [
        "start",
        "prepared",
        "start",
        "answered True",
    ]
    assert await orch.waiting() == []
    assert (parker.stats.parked, resumer.stats.parked) == (1, 0)
    events = await _events(client, settings.prefix, handle.task_id)
    assert [e for e in events if e in ("waiting", "replied")] == ["waiting", "replied"]
    assert events[-1] == "succeeded" and events.count("succeeded") == 1  # one result
    assert sum(waits.counts) == replied_before + 1


async def _events(client: Redis, prefix: str, task_id: str) -> list[str]:
    """The task's audit event types, in order, from its agent's outbox streams."""
    out = []
    for shard in range(2):
        for _, fields in await entries(client, f"{prefix}:{{approver:{shard}}}:audit"):
            out += [e["type"] for e in orjson.loads(fields[b"events"]) if e["task_id"] == task_id]
    return out


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("fail", ("failed", "reply_timeout", None)),
        ("default", ("success", None, {"approved": False, "note": "default"})),
    ],
)
async def test_a_wait_that_runs_out_applies_the_policy(
    orch: Orchestrator,
    worker: Worker,
    client: Redis,
    settings: Settings,
    tmp_path: Path,
    policy: str,
    expected: tuple[str, str | None, Any],
) -> None:
    handle = await _submit(orch, tmp_path, timeout_s=0.3, on_timeout=policy, default=True)
    result = await handle.result(timeout=30)
    assert _outcome(result) == expected
    with pytest.raises(NotWaiting):  # too late: the policy has run
        await orch.reply(handle.task_id, {"approved": True})
    events = await _events(client, settings.prefix, handle.task_id)
    assert [e for e in events if e in ("waiting", "wait_expired")] == ["waiting", "wait_expired"]


def _outcome(result: Result) -> tuple[str, str | None, Any]:
    code = result.error.code if result.error is not None else None
    return result.status, code, result.output


async def test_an_escalated_question_waits_again_for_the_escalation_to_answer(
    orch: Orchestrator, worker: Worker, client: Redis, settings: Settings, tmp_path: Path
) -> None:
    handle = await _submit(orch, tmp_path, timeout_s=0.3, on_timeout="escalate")

    async def escalated() -> dict[str, Any] | None:
        info = await orch.lookup(handle.task_id)
        resumed = [line for line in _runs(tmp_path) if line.endswith("start")][1:]
        return info if info and info.get("state") == "waiting" and resumed else None

    await eventually(escalated, timeout=30, what="re-parked after escalating")
    assert "escalated" in await _events(client, settings.prefix, handle.task_id)
    key = orch.keys.idempotency(f"escalation:{handle.task_id}:1", None)
    raw = await client.get(key)
    escalation_id = (raw.decode() if isinstance(raw, bytes) else str(raw)).split(" ")[0]
    escalation = await orch.lookup(escalation_id)
    assert escalation is not None and escalation["agent"] == "escalations"
    # Whoever handles the escalation answers the original task.
    await orch.reply(handle.task_id, {"approved": True, "note": "escalated"})
    result = await handle.result(timeout=30)
    assert result.output == {"approved": True, "note": "escalated"}


async def test_an_escalation_nobody_answers_fails_the_task(
    orch: Orchestrator, worker: Worker, tmp_path: Path
) -> None:
    handle = await _submit(orch, tmp_path, timeout_s=0.3, on_timeout="escalate")
    result = await handle.result(timeout=30)
    assert _outcome(result)[:2] == ("failed", "reply_timeout")
    assert "after escalation" in (result.error.message if result.error else "")


async def test_a_waiting_task_can_be_cancelled(
    orch: Orchestrator, worker: Worker, client: Redis, tmp_path: Path
) -> None:
    handle = await _submit(orch, tmp_path, timeout_s=600)
    await _waiting(orch, handle)
    assert await orch.cancel(handle.task_id) == "ok"
    result = await handle.result(timeout=10)
    assert _outcome(result)[:2] == ("failed", "cancelled")
    with pytest.raises(NotWaiting):
        await orch.reply(handle.task_id, {"approved": True})
    # Its wait's timer left with the cancel: the timeout has nothing to wake.
    assert await _run_out(client, orch, [handle]) == 0
    assert _outcome(await handle.result(timeout=1))[:2] == ("failed", "cancelled")
    assert len(_runs(tmp_path)) == 2  # started and prepared, once
    assert await orch.waiting() == []


async def test_a_deadline_that_passes_while_waiting_ends_the_task(
    orch: Orchestrator, worker: Worker, tmp_path: Path
) -> None:
    deadline = (utcnow() + timedelta(seconds=1.5)).isoformat()
    handle = await orch.submit(
        {
            "intent": "approve",
            "payload": {"runs": str(tmp_path / "runs.txt"), "timeout_s": 600},
            "deadline": deadline,
        }
    )
    result = await handle.result(timeout=30)
    assert _outcome(result)[:2] == ("failed", "deadline_exceeded")
    assert len(_runs(tmp_path)) == 2  # started and prepared; never ran again


async def test_a_reply_racing_the_timeout_resumes_the_task_once(
    orch: Orchestrator, new_worker: NewWorker, client: Redis, settings: Settings, tmp_path: Path
) -> None:
    """Both orders of the race, each made to happen (not left to timing): the reply script
    and the wake script each run whole, so every race ends in one of these two orders.

    - The reply first: it takes the wait's timer out with it, so when the time is up
      nothing fires; the task resumes with the answer.
    - The timeout first: the wake queues the task again, and a reply landing before any
      worker takes it (state ``queued``) is refused; the task resumes to its policy.

    No worker runs between the park and the end of the replies but one that reads tier p0
    only: its delayed pump wakes the waits that ran out, into p2, where nobody reads. The
    waits are made to run out now by moving their timers' due time, not by sleeping."""
    async with running(new_worker()):
        handles = [await _submit(orch, tmp_path, timeout_s=600) for _ in range(2 * RACERS)]
        for h in handles:
            await _waiting(orch, h)
    replied_first, timed_out_first = handles[:RACERS], handles[RACERS:]
    for h in replied_first:
        await orch.reply(h.task_id, {"approved": True, "note": "in time"})
    # Every wait that still has a timer is due now: the replied ones have none left.
    assert await _run_out(client, orch, handles) == len(timed_out_first)
    async with running(new_worker(Placement(("p0",), (0, 1)))):  # its pump, no reader of p2

        async def woken() -> bool:
            states = [await orch.task_state(h.task_id) for h in timed_out_first]
            return states == ["queued"] * len(timed_out_first)

        await eventually(woken, timeout=30, what="the timed-out waits queued again")
        for h in timed_out_first:  # too late: the timeout won, its task not yet taken
            with pytest.raises(NotWaiting) as late:
                await orch.reply(h.task_id, {"approved": True, "note": "late"})
            assert late.value.state == "queued"
        assert [await orch.task_state(h.task_id) for h in replied_first] == ["queued"] * RACERS
    async with running(new_worker()):
        results = {h.task_id: _outcome(await h.result(timeout=30)) for h in handles}
    won = [results[h.task_id] for h in replied_first]
    lost = [results[h.task_id] for h in timed_out_first]
    assert won == [("success", None, {"approved": True, "note": "in time"})] * RACERS
    assert [outcome[:2] for outcome in lost] == [("failed", "reply_timeout")] * RACERS
    assert len(won) > 0 and len(lost) > 0
    # every task started twice (asked, resumed) and never a third time
    starts = [line.split(" ")[0] for line in _runs(tmp_path) if line.endswith("start")]
    assert sorted(starts.count(h.task_id) for h in handles) == [2] * len(handles)
    for h in handles:
        events = await _events(client, settings.prefix, h.task_id)
        ended = [e for e in events if e in ("replied", "wait_expired")]
        assert ended == (["replied"] if h in replied_first else ["wait_expired"]), events


RACERS = 4  # tasks on each side of the race


async def _run_out(client: Redis, orch: Orchestrator, handles: list[TaskHandle]) -> int:
    """Make the waits of these tasks that still have a timer due now (their member in the
    shard's delayed set, ``w:<task id>``, rescored: XX never adds one); how many had one."""
    now = int(time.time() * 1000)
    changed = 0
    for h in handles:
        delayed = orch.keys.shard(h.agent, h.shard).delayed
        changed += int(await client.zadd(delayed, {f"w:{h.task_id}": now}, xx=True, ch=True) or 0)
    return changed


async def test_the_exporter_counts_the_waiting_tasks(
    orch: Orchestrator, worker: Worker, client: Redis, settings: Settings, tmp_path: Path
) -> None:
    handles = [await _submit(orch, tmp_path) for _ in range(3)]
    for h in handles:
        await _waiting(orch, h)
    fleet = FleetMetrics()
    await FleetSampler(services_for(client, settings), orch.config, fleet).sample()
    sample = fleet.registry.get_sample_value
    counted = [sample("deepagents_waiting_tasks", {"agent": "approver", "shard": s}) for s in "01"]
    assert sum(n or 0 for n in counted) == 3


async def test_a_question_with_actions_takes_each_agent_inbox_answer(
    orch: Orchestrator, worker: Worker, tmp_path: Path
) -> None:
    """accept gives the proposal, edit the edited value, respond the text, ignore nothing;
    an action the question does not allow, and an edit that breaks the schema, are refused
    naming the field, as any reply is."""
    every = ["accept", "edit", "respond", "ignore"]
    handles = {a: await _submit(orch, tmp_path, actions=every, proposal="drafted") for a in every}
    narrow = await _submit(orch, tmp_path, actions=["accept", "ignore"], proposal="drafted")
    for h in [*handles.values(), narrow]:
        info = await _waiting(orch, h)
    schema = orjson.loads(info["ask_schema"])
    assert schema["x-deepagents-inbox"]["actions"] == ["accept", "ignore"]
    assert schema["x-deepagents-inbox"]["proposal"] == {"approved": True, "note": "drafted"}

    with pytest.raises(InvalidReply) as refused:
        await orch.reply(narrow.task_id, {"action": "respond", "value": "no"})
    assert refused.value.field == "action"
    with pytest.raises(InvalidReply) as bad_edit:
        await orch.reply(handles["edit"].task_id, {"action": "edit", "value": {"note": "x" * 300}})
    assert bad_edit.value.field.startswith("value")
    await orch.reply(handles["accept"].task_id, {"action": "accept"})
    edited = {"approved": False, "note": "changed"}
    await orch.reply(handles["edit"].task_id, {"action": "edit", "value": edited})
    await orch.reply(handles["respond"].task_id, {"action": "respond", "value": "call me"})
    await orch.reply(handles["ignore"].task_id, {"action": "ignore"})
    await orch.reply(narrow.task_id, {"action": "ignore"})
    outputs = {a: (await h.result(timeout=60)).output for a, h in handles.items()}
    assert outputs == {
        "accept": {
            "action": "accept",
            "value": {"approved": True, "note": "drafted"},
            "response": None,
        },
        "edit": {"action": "edit", "value": edited, "response": None},
        "respond": {"action": "respond", "value": None, "response": "call me"},
        "ignore": {"action": "ignore", "value": None, "response": None},
    }
    assert (await narrow.result(timeout=60)).output["action"] == "ignore"
