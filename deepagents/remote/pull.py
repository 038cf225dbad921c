"""Pull mode: the service asks the worker for tasks instead of being called.

The worker serves two calls on its ``pull.listen`` address (``docs/remote-agents.md``):
``POST /v1/lease`` (a long poll: up to N tasks, each the request ``run`` would get, with a
lease id and how long the lease is held) and ``POST /v1/complete`` (each task's answer, as
``run`` would answer it, with its lease id).

Only where the round trip happens changes: each task's delivery (heartbeat, owner-checked
commit, retry, dead letter) stays the worker's, which runs ``RemoteAgent.execute`` as for
any service; that call waits here for a puller to lease the task and then to complete it.
- Nobody leases the task within the call's timeout: ``NotLeased`` (the service is not
  there, as a refused connection says in push mode: the circuit breaker counts it).
- The lease runs out (the puller died holding it, or is too slow): ``LeaseExpired``, a
  failed call the worker retries as any other; the lease is forgotten first, so its late
  completion is refused and can never be committed.
- An answer that does not match the schema, or names another task than its lease's, is a
  protocol error of that task only; the other answers of the same request are read on
  their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from pydantic import ValidationError

from deepagents.errors import ConfigError, RemoteProtocolError
from deepagents.remote import wire
from deepagents.remote.answers import (
    BadAnswer,
    SecretMask,
    parse_answer,
    parse_answers,
    refused_in,
)
from deepagents.remote.errors import ServiceDown, ServiceUnreachable, protocol_error
from deepagents.remote.expiry import Expiries

log = logging.getLogger("deepagents.remote.pull")
_PROBLEM = "application/problem+json"
# Ended leases remembered, so that a late completion hears why it is refused.
_ENDED_KEPT = 10_000


class NotLeased(ServiceUnreachable):
    """No puller leased the task in time: as a refused connection in push mode."""


class LeaseExpired(ServiceDown):
    """The puller held the task past its lease without completing it: retried."""


@dataclass(eq=False)
class _Waiting:
    """A task waiting in the worker for its lease, then for its answer."""

    request: dict[str, Any]
    leased: asyncio.Future[float]  # the lease's length in seconds, once leased
    answer: asyncio.Future[wire.RunAnswer]
    since: float  # the event loop's time when it began to wait
    lease: str | None = field(default=None)

    @property
    def task_id(self) -> str:
        return str(self.request["task"]["id"])


def problem(status: int, title: str, detail: str) -> dict[str, Any]:
    return {"type": "about:blank", "title": title, "status": status, "detail": detail}


class LeaseBoard:
    """The tasks of one worker process waiting for pullers, and the leases they hold."""

    def __init__(
        self, *, lease_s: float, max_wait_s: float, max_answer_bytes: int, mask: SecretMask
    ) -> None:
        self._mask = mask
        self._lease_s = lease_s
        self._max_wait_s = max_wait_s
        self._max_answer_bytes = max_answer_bytes
        self._queue: deque[_Waiting] = deque()
        self._arrived = asyncio.Event()
        self._leases: dict[str, _Waiting] = {}
        self._ended: OrderedDict[str, str] = OrderedDict()
        self.version: str | None = None  # what the last puller said it runs
        self._closed = False
        self._expiries = Expiries()

    # the worker's side ---------------------------------------------------------------

    async def run(self, request: dict[str, Any], timeout: float) -> wire.RunAnswer:
        """This task's answer (validated, the worker's secrets masked) once a puller leased
        and completed it. ``NotLeased`` when no puller leased it within ``timeout``,
        ``LeaseExpired`` when its lease ran out first."""
        loop = asyncio.get_running_loop()
        waiting = _Waiting(request, loop.create_future(), loop.create_future(), loop.time())
        self._queue.append(waiting)
        self._arrived.set()
        try:
            # Timers on the futures (expiry.py): once one fires, no puller can lease the
            # task or complete it any more.
            due = self._expiries.add(waiting.leased, timeout)
            try:
                lease_s = await waiting.leased
            except TimeoutError:
                raise NotLeased(f"lease: no puller leased the task within {timeout:g} s") from None
            finally:
                self._expiries.discard(waiting.leased, due)
            due = self._expiries.add(waiting.answer, lease_s)
            try:
                return await waiting.answer
            except TimeoutError:
                why = f"lease: not completed within its lease of {lease_s:g} s (retried)"
                raise LeaseExpired(why) from None
            finally:
                self._expiries.discard(waiting.answer, due)
        finally:
            if waiting.lease is None:
                with contextlib.suppress(ValueError):
                    self._queue.remove(waiting)  # nobody leased it: no puller may now
            why = "ran out: the worker took the task back and retries it"
            self._end(waiting, why)

    def _end(self, waiting: _Waiting, why: str) -> None:
        waiting.leased.cancel()
        waiting.answer.cancel()
        if waiting.lease is not None and self._leases.pop(waiting.lease, None) is not None:
            self._ended[waiting.lease] = why
            while len(self._ended) > _ENDED_KEPT:
                self._ended.popitem(last=False)

    # the puller's side ---------------------------------------------------------------

    async def lease(self, ask: wire.LeaseRequest) -> list[dict[str, Any]]:
        """Up to ``ask.max_tasks`` tasks, waiting up to ``ask.wait_ms`` for the first."""
        if ask.version is not None:
            self.version = ask.version
        loop = asyncio.get_running_loop()
        until = loop.time() + min(ask.wait_ms / 1000, self._max_wait_s)
        while True:
            taken = self._take(ask.max_tasks)
            if taken or self._closed or loop.time() >= until:
                return taken
            self._arrived.clear()
            try:
                async with asyncio.timeout_at(until):
                    await self._arrived.wait()
            except TimeoutError:
                return self._take(ask.max_tasks)

    def _take(self, most: int) -> list[dict[str, Any]]:
        taken: list[dict[str, Any]] = []
        while self._queue and len(taken) < most:
            waiting = self._queue.popleft()
            if waiting.leased.done():  # its call gave up (deadline, cancel) before a lease
                continue
            request = dict(waiting.request)
            lease_s = self._lease_s
            left_ms = request.get("time_left_ms")
            if left_ms is not None:  # less the time it waited to be leased
                waited_ms = (asyncio.get_running_loop().time() - waiting.since) * 1000
                request["time_left_ms"] = left_ms = max(0, int(left_ms - waited_ms))
                lease_s = max(0.001, min(lease_s, left_ms / 1000))
            waiting.lease = secrets.token_urlsafe(16)
            self._leases[waiting.lease] = waiting
            waiting.leased.set_result(lease_s)
            taken.append({**request, "lease": waiting.lease, "lease_ms": int(lease_s * 1000)})
        return taken

    def complete(self, item: Any, suspect: bool = False) -> dict[str, Any]:
        """The outcome of one answer (``CompleteOutcome``): accepted, or the problem; a
        malformed answer of a held lease also fails that lease's task (``suspect``: some
        answer of the request may hold a value the strict parse refused)."""
        lease = item.get("lease") if isinstance(item, dict) else None
        if not isinstance(lease, str):
            detail = "each answer needs its lease (a string)"
            return _refused(None, problem(400, "answer without a lease", detail))
        waiting = self._leases.get(lease)
        if waiting is not None and waiting.answer.done():  # its lease ran out just now
            self._end(waiting, "ran out: the worker took the task back and retries it")
            waiting = None
        if waiting is None:
            ended = self._ended.get(lease)
            if ended is None:
                return _refused(lease, problem(404, "unknown lease", "no such lease here"))
            return _refused(lease, problem(409, "lease no longer held", f"the lease {ended}"))
        answer = self._read(waiting, item, suspect)
        if isinstance(answer, RemoteProtocolError):
            waiting.answer.set_exception(answer)
            self._end(waiting, "ended: its answer was refused as a protocol error")
            return _refused(lease, problem(422, "answer refused", str(answer)))
        waiting.answer.set_result(answer)
        self._end(waiting, "completed already: a task is committed once")
        return {"lease": lease, "accepted": True}

    def _read(
        self, waiting: _Waiting, item: dict[str, Any], suspect: bool
    ) -> wire.CompleteAnswer | RemoteProtocolError:
        """The answer, validated once with the worker's secrets masked; or why it is
        refused."""
        why = refused_in(item) if suspect else None
        if why is not None:
            return protocol_error(wire.COMPLETE, f"the answer is refused: {why}")
        try:
            size = len(orjson.dumps(item))
        except TypeError as exc:  # a string no JSON holds: a lone surrogate's escape
            return protocol_error(wire.COMPLETE, f"the answer is refused: {exc}")
        if size > self._max_answer_bytes:
            return protocol_error(
                wire.COMPLETE, f"the answer of {size} bytes is over {self._max_answer_bytes}"
            )
        if item.get("id") != waiting.task_id:
            named = str(item.get("id"))[:64]
            why = f"the answer names task {named!r}, but its lease is for task {waiting.task_id!r}"
            return protocol_error(wire.COMPLETE, why)
        try:
            return wire.CompleteAnswer.model_validate(self._mask.tree(item))
        except ValidationError as exc:
            where = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['type']}" for e in exc.errors()[:3]
            )
            return protocol_error(wire.COMPLETE, f"answer does not match the schema ({where})")

    def close(self) -> None:
        """Answer the long polls now (the worker is stopping; the tasks it was running
        end with it and are redelivered, so their leases end too)."""
        self._closed = True
        self._arrived.set()


def _refused(lease: str | None, doc: dict[str, Any]) -> dict[str, Any]:
    return {"lease": lease, "accepted": False, "problem": doc}


class PullServer:
    """The HTTP endpoint pullers call; refuses any call without the configured token."""

    def __init__(self, board: LeaseBoard, listen: str, token: str, max_body: int) -> None:
        self._board = board
        host, _, port = listen.rpartition(":")
        self._host, self._port = host.strip("[]"), int(port)
        self._expected = f"Bearer {token}".encode()
        app = web.Application(client_max_size=max_body, middlewares=[self._guard])
        app.router.add_post(wire.PREFIX + "/" + wire.LEASE, self._lease)
        app.router.add_post(wire.PREFIX + "/" + wire.COMPLETE, self._complete)
        # A stopping worker answers the long polls at once (the board wakes them) and does
        # not wait long for the rest.
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=2.0
        )
        self.port: int | None = None

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            where = f"{self._host}:{self._port}"
            raise ConfigError(f"pull mode: cannot listen on {where}: {exc.strerror}") from None
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self._port
        log.info(
            "pull mode: serving leases",
            extra={"action": "pull_listening", "host": self._host, "port": self.port},
        )

    async def aclose(self) -> None:
        self._board.close()
        await self._runner.cleanup()

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, self._expected):
            detail = "send the configured token as 'authorization: Bearer <token>'"
            return _problem_answer(
                problem(401, "unauthorized", detail), {"www-authenticate": "Bearer"}
            )
        try:
            answer: web.StreamResponse = await handler(request)
        except web.HTTPException as exc:
            return _problem_answer(problem(exc.status, exc.reason, exc.text or exc.reason))
        return answer

    async def _lease(self, request: web.Request) -> web.Response:
        try:
            ask = wire.LeaseRequest.model_validate(parse_answer(await request.read() or b"{}"))
        except (BadAnswer, ValidationError) as exc:
            return _problem_answer(problem(400, "bad lease request", _why(exc)))
        tasks = await self._board.lease(ask)
        return web.Response(body=orjson.dumps({"tasks": tasks}), content_type="application/json")

    async def _complete(self, request: web.Request) -> web.Response:
        try:
            # A value the strict parse refuses fails the answer holding it, not the request.
            doc, suspect = parse_answers(await request.read())
            body = wire.CompleteRequest.model_validate(doc)
        except (BadAnswer, ValidationError) as exc:
            return _problem_answer(problem(400, "bad completion", _why(exc)))
        outcomes = [self._board.complete(item, suspect) for item in body.answers]
        return web.Response(
            body=orjson.dumps({"outcomes": outcomes}), content_type="application/json"
        )


def _why(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return (
            "does not match the schema ("
            + "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['type']}" for e in exc.errors()[:3]
            )
            + ")"
        )
    return str(exc)


def _problem_answer(doc: dict[str, Any], headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(doc), status=doc["status"], content_type=_PROBLEM, headers=headers
    )
