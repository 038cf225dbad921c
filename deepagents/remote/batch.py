"""Tasks sharing one ``run_batch`` request: the round trip is shared, nothing else.

Each task still holds its own delivery (heartbeat, owner-checked commit, retry, dead
letter) in the worker; here it only waits for its own answer. A batch leaves when it holds
``max_tasks`` tasks, or ``max_wait_s`` after its first task (0: at the event loop's next
turn, so the tasks that became ready together share it and a lone task never waits); but
while ``max_requests`` batches are in flight, the next keeps gathering tasks and leaves when
one returns. So a busy worker sends few large batches (its round trips, not the tasks, cost
it most: ``docs/benchmarks.md``), and an idle one sends each task at once.

An answer is read per task: one missing, one answered twice (a service answering another
task's id), one over the size limit or one that does not match the schema is a protocol
error of that task only. What cannot be told apart per task (the request failed, the
service answered an error status, the body is not JSON or not a batch answer) is the
error of every task of the batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import orjson

from deepagents.remote.answers import (
    BadAnswer,
    ReadAnswers,
    SecretMask,
    parse_answers,
    refused_in,
    run_answers,
)
from deepagents.remote.errors import protocol_error
from deepagents.remote.wire import RunAnswer

STEP = "run_batch"
# Sends one batch (the requests of its tasks) and hands back the answer's body (or its
# answers already read per task), or raises the error every task of the batch ends with.
Send = Callable[[list[dict[str, Any]]], Awaitable[bytes | ReadAnswers]]


class Batcher:
    def __init__(
        self,
        send: Send,
        *,
        max_tasks: int,
        max_wait_s: float,
        max_answer_bytes: int,
        max_requests: int,
        mask: SecretMask,
    ) -> None:
        self._send = send
        self._mask = mask
        self._max_tasks = max_tasks
        self._max_requests = max_requests
        self._max_wait_s = max_wait_s
        self._max_answer_bytes = max_answer_bytes
        self._pending: list[tuple[dict[str, Any], asyncio.Future[RunAnswer]]] = []
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self._in_flight: set[asyncio.Task[None]] = set()

    def submit(self, request: dict[str, Any]) -> asyncio.Future[RunAnswer]:
        """Queue this task's request: the future holds its answer (its secrets masked), the
        protocol error of this task, or the error of the whole batch. The caller bounds
        the wait (``expiry.Expiries``), and cancels the future when it gives up: nobody reads
        the answer any more. Not a coroutine: the caller's own awaits the future, one
        coroutine less per remote task."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[RunAnswer] = loop.create_future()
        self._pending.append((request, answer))
        if len(self._pending) >= self._max_tasks:
            self._flush()
        elif self._timer is None and len(self._in_flight) < self._max_requests:
            if self._max_wait_s > 0:
                self._timer = loop.call_later(self._max_wait_s, self._flush)
            else:
                self._timer = loop.call_soon(self._flush)
        return answer

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        # Every request in flight: the tasks keep gathering, and leave when one returns.
        while self._pending and len(self._in_flight) < self._max_requests:
            batch = self._pending[: self._max_tasks]
            del self._pending[: self._max_tasks]
            sending = asyncio.ensure_future(self._round_trip(batch))
            self._in_flight.add(sending)
            sending.add_done_callback(self._sent)

    def _sent(self, sending: asyncio.Task[None]) -> None:
        self._in_flight.discard(sending)
        if self._pending and self._timer is None:
            self._flush()

    async def _round_trip(
        self, batch: list[tuple[dict[str, Any], asyncio.Future[RunAnswer]]]
    ) -> None:
        waiting = {request["task"]["id"]: answer for request, answer in batch}
        try:
            raw = await self._send([request for request, _ in batch])
            if isinstance(raw, ReadAnswers):
                answers, suspect, fits = raw.items, raw.suspect, False
            else:
                answers, suspect = _answers(raw)
                fits = not suspect and _encodes_within(answers, self._max_answer_bytes)
            # A bug in reading them must end the batch's tasks too, not strand them.
            outcomes = self._outcomes(answers, set(waiting), suspect, fits)
        except Exception as exc:
            _fail(waiting.values(), exc)
            return
        except BaseException:
            for answer in waiting.values():
                answer.cancel()
            raise
        for task_id, outcome in outcomes.items():
            answer = waiting.pop(task_id)
            if answer.done():
                continue
            if isinstance(outcome, Exception):
                answer.set_exception(outcome)
            else:
                answer.set_result(outcome)
        for answer in waiting.values():
            if not answer.done():
                answer.set_exception(
                    protocol_error(STEP, "the batch's answer has no answer for this task")
                )

    def _outcomes(
        self, answers: list[Any], ids: set[str], suspect: bool, fits: bool
    ) -> dict[str, RunAnswer | Exception]:
        """Each answered task's answer, or the protocol error it ends with (``suspect``:
        some answer may hold a value the strict parse refused; ``fits``: all of them
        together encode within one answer's size limit, so each does)."""
        outcomes: dict[str, RunAnswer | Exception] = {}
        items: dict[str, dict[str, Any]] = {}
        for task_id, item in self._sorted(answers, ids, suspect, fits).items():
            if isinstance(item, Exception):
                outcomes[task_id] = item
            else:
                items[task_id] = item
        # Read together, each on its own only when one does not match the schema.
        read = run_answers(STEP, list(items.values()), self._mask)
        outcomes.update(zip(items, read, strict=True))
        return outcomes

    def _sorted(
        self, answers: list[Any], ids: set[str], suspect: bool, fits: bool
    ) -> dict[str, dict[str, Any] | Exception]:
        """Each task's answer, or the protocol error it ends with: an id answered twice
        fails its task (which answer is its own cannot be told); an answer naming no task of
        the batch is dropped (its task, if any, then has none)."""
        seen: dict[str, dict[str, Any] | Exception] = {}
        for item in answers:
            task_id = item.get("id") if isinstance(item, dict) else None
            if not isinstance(task_id, str) or task_id not in ids:
                continue
            if task_id in seen:
                seen[task_id] = protocol_error(STEP, "the batch's answer answers this task twice")
                continue
            assert isinstance(item, dict)
            why = refused_in(item) if suspect else None
            if why is not None:
                seen[task_id] = protocol_error(STEP, f"this task's answer is refused: {why}")
                continue
            if fits:
                seen[task_id] = item
                continue
            try:
                size = len(orjson.dumps(item))
            except TypeError as exc:  # a string no JSON holds: a lone surrogate's escape
                seen[task_id] = protocol_error(STEP, f"this task's answer is refused: {exc}")
                continue
            if size > self._max_answer_bytes:
                over = f"this task's answer of {size} bytes is over {self._max_answer_bytes}"
                seen[task_id] = protocol_error(STEP, over)
            else:
                seen[task_id] = item
        return seen

    async def aclose(self) -> None:
        while self._pending or self._in_flight:
            self._flush()
            await asyncio.gather(*self._in_flight, return_exceptions=True)


def _fail(answers: Iterable[asyncio.Future[RunAnswer]], exc: Exception) -> None:
    for answer in answers:
        if not answer.done():
            answer.set_exception(exc)


def _encodes_within(answers: list[Any], limit: int) -> bool:
    """Whether the answers, all together, encode within ``limit`` bytes: then each answer
    does, and need not be encoded alone to be measured. The body's own size does not tell:
    a number may encode longer than it was sent (``1e15`` as ``1000000000000000.0``), and
    orjson reads deeper nesting than it writes."""
    try:
        return len(orjson.dumps(answers)) <= limit
    except orjson.JSONEncodeError:
        return False


def _answers(raw: bytes) -> tuple[list[Any], bool]:
    """The answers of a batch, and whether one may hold a value the strict parse refused;
    the error of the whole batch when its body is not JSON or not a batch answer."""
    try:
        doc, suspect = parse_answers(raw)
    except BadAnswer as exc:
        raise protocol_error(STEP, f"response refused: {exc}", raw) from None
    answers = doc.get("answers") if isinstance(doc, dict) else None
    if not isinstance(answers, list):
        raise protocol_error(STEP, "response does not match the schema (answers: a list)", raw)
    return answers, suspect
