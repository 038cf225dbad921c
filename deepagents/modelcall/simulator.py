"""A model SIMULATOR: an OpenAI-compatible chat-completions server on loopback.

For the demo and for tests, never for production. It answers ``POST /v1/chat/completions``
(plain and SSE streaming) with deterministic text, and can be told to misbehave: latency,
a token rate, a random error rate, scripted 429/503 bursts (with ``Retry-After``), stalls
mid-stream, expiring API keys, and its own requests/tokens-per-window limits (answering 429
when they are passed, as a provider would). Control endpoints live under ``/sim/``.

It answers OpenAI-format tool calls as scripted by ``sim:`` directives in the messages
(``simscript``): a test or the demo runs a tool-calling loop without a real model.

It is a small HTTP/1.1 server on ``asyncio`` streams (keep-alive, chunked SSE): enough for
httpx and curl, nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any, TypeVar

import orjson

from deepagents.modelcall import simanthropic, simscript
from deepagents.modelcall.simscript import SimAnswer
from deepagents.modelcall.simwire import HttpError, chunk, event, head, send_json

T = TypeVar("T")

MAX_BODY = 4 * 1024 * 1024
_WORDS = ("the", "model", "simulator", "answers", "with", "plain", "words", "for", "tests")


class Api(StrEnum):
    """The API a request spoke (its path says which)."""

    OPENAI = "openai"  # POST .../chat/completions
    ANTHROPIC = "anthropic"  # POST .../messages
    EMBEDDINGS = "embeddings"  # POST .../embeddings (OpenAI format)


@dataclass
class SimSettings:
    latency_s: float = 0.0  # before the response headers
    first_token_s: float = 0.0  # streams: headers -> first token
    token_rate: float = 0.0  # streams: tokens per second; 0 = as fast as possible
    completion_tokens: int = 12  # answer length (capped by the request's max_tokens)
    error_rate: float = 0.0  # share of requests answered 503 at random
    require_key: bool = False  # check "Authorization: Bearer <key>" against the keys
    rpm: int | None = None  # the simulated provider's own limits, per window
    tpm: int | None = None
    window_s: float = 60.0
    omit_usage: bool = False  # leave "usage" out (clients must estimate)
    model_version: str = "sim-1"
    seed: int | None = None
    context_tokens: int | None = None  # a longer prompt is refused: context_length_exceeded
    embedding_dims: int = 8  # length of every embedding vector


@dataclass
class Action:
    """A scripted answer for the next request: an error, a slow start or a stall."""

    status: int = 200
    retry_after_s: float | None = None
    code: str | None = None  # the error code in the JSON body
    latency_s: float | None = None
    stall_after: int | None = None  # streams: stop after this many tokens…
    stall_s: float = 60.0  # …for this long
    error_after: int | None = None  # Anthropic streams: an overloaded_error event after N tokens


@dataclass
class Logged:
    arrived: float  # time.monotonic()
    request_id: str | None
    status: int
    prompt_tokens: int
    completion_tokens: int
    stream: bool
    key_ok: bool
    model: str = ""
    max_tokens: int | None = None
    tools: tuple[str, ...] = ()  # names of the tools offered
    tool_calls: tuple[str, ...] = ()  # names of the tools the answer asked for
    api: Api = Api.OPENAI
    inputs: int = 0  # embeddings: how many inputs the request carried


@dataclass
class _State:
    settings: SimSettings
    script: deque[Action] = field(default_factory=deque)
    keys: dict[str, float] = field(default_factory=dict)  # key -> expiry (monotonic)
    log: list[Logged] = field(default_factory=list)
    inflight: int = 0
    max_inflight: int = 0


def count_tokens(messages: list[Any]) -> int:
    """The simulator's tokenizer: 4 characters a token, 4 tokens of framing per message."""
    total = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        total += math.ceil(len(content) / 4) + 4 if isinstance(content, str) else 4
    return total


class Simulator:
    """The server. ``await start()`` binds 127.0.0.1 (port 0: a free one); ``url`` is the
    OpenAI base URL (``…/v1``)."""

    def __init__(self, settings: SimSettings | None = None, *, port: int = 0) -> None:
        self.state = _State(settings or SimSettings())
        self._port = port
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self._rand = random.Random(self.state.settings.seed)

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", self._port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._conns):
                task.cancel()
            await asyncio.gather(*self._conns, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    # -- control (also reachable over HTTP under /sim/) --

    def configure(self, **changes: Any) -> None:
        self.state.settings = replace(self.state.settings, **changes)

    def push(self, *actions: Action) -> None:
        self.state.script.extend(actions)

    def burst(
        self,
        status: int,
        count: int,
        *,
        retry_after_s: float | None = None,
        code: str | None = None,
    ) -> None:
        self.push(*(Action(status, retry_after_s, code) for _ in range(count)))

    def issue_key(
        self, key: str | None = None, ttl_s: float | None = None, *, revoke_others: bool = False
    ) -> str:
        key = key or "sim-" + uuid.uuid4().hex
        if revoke_others:
            self.state.keys.clear()
        self.state.keys[key] = time.monotonic() + ttl_s if ttl_s else math.inf
        return key

    def stats(self) -> dict[str, Any]:
        log = self.state.log
        statuses: dict[str, int] = {}
        for entry in log:
            statuses[str(entry.status)] = statuses.get(str(entry.status), 0) + 1
        return {
            "requests": len(log),
            "statuses": statuses,
            "max_inflight": self.state.max_inflight,
            "tokens": sum(e.prompt_tokens + e.completion_tokens for e in log if e.status == 200),
        }

    def reset(self) -> None:
        self.state.log.clear()
        self.state.script.clear()
        self.state.max_inflight = 0

    # -- HTTP --

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            # stop() cancels open connections; ending normally keeps asyncio's stream
            # callback (which reads task.exception()) from logging an error.
            pass
        finally:
            self._conns.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        line = await reader.readline()
        if not line:
            return False
        method, path, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (raw := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = raw.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        if length > MAX_BODY:
            await send_json(writer, 413, {"error": {"message": "too large", "code": "too_large"}})
            return False
        body = await reader.readexactly(length) if length else b""
        await self._route(method, path, headers, body, writer)
        return headers.get("connection", "").lower() != "close"

    async def _route(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        writer: asyncio.StreamWriter,
    ) -> None:
        route = path.rstrip("/")
        api = Api.ANTHROPIC if method == "POST" and route.endswith("/messages") else Api.OPENAI
        try:
            if method == "POST" and route.endswith("/chat/completions"):
                await self._chat(headers, body, writer, Api.OPENAI)
            elif api is Api.ANTHROPIC:
                await self._chat(headers, body, writer, Api.ANTHROPIC)
            elif method == "POST" and route.endswith("/embeddings"):
                await self._embeddings(headers, body, writer)
            elif path.startswith("/sim/"):
                await send_json(writer, 200, self._control(method, path, body))
            elif method == "GET" and path.rstrip("/").endswith("/models"):
                await send_json(
                    writer,
                    200,
                    {
                        "object": "list",
                        "data": [
                            {"id": "sim", "object": "model", "owned_by": "deepagents-simulator"}
                        ],
                    },
                )
            else:
                raise HttpError(404, "not_found", f"no route {method} {path}")
        except HttpError as exc:
            error: dict[str, Any] = {
                "error": {"message": str(exc), "type": "simulator_error", "code": exc.provider_code}
            }
            if api is Api.ANTHROPIC:
                error = simanthropic.error_body(exc.status, exc.provider_code, str(exc))
            await send_json(writer, exc.status, error, exc.headers)

    def _control(self, method: str, path: str, body: bytes) -> dict[str, Any]:
        data = orjson.loads(body) if body else {}
        if path == "/sim/stats":
            return self.stats()
        if method == "POST" and path == "/sim/settings":
            self.configure(**data)
            return asdict(self.state.settings)
        if method == "POST" and path == "/sim/script":
            self.push(*(Action(**a) for a in data.get("actions", [])))
            return {"queued": len(self.state.script)}
        if method == "POST" and path == "/sim/keys":
            key = self.issue_key(
                data.get("key"), data.get("ttl_s"), revoke_others=bool(data.get("revoke_others"))
            )
            return {"key": key}
        if method == "POST" and path == "/sim/reset":
            self.reset()
            return {"reset": True}
        raise HttpError(404, "not_found", f"no control endpoint {method} {path}")

    async def _chat(
        self, headers: dict[str, str], body: bytes, writer: asyncio.StreamWriter, api: Api
    ) -> None:
        arrived = time.monotonic()
        try:
            request = orjson.loads(body)
            if api is Api.ANTHROPIC:
                messages = simanthropic.openai_messages(request)
            else:
                messages = list(request["messages"])
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise HttpError(400, "invalid_request", "body must be JSON with messages") from None
        settings = self.state.settings
        stream = bool(request.get("stream"))
        prompt = count_tokens(messages)
        scripted = simscript.answer(messages)
        completion = max(
            1, min(int(request.get("max_tokens") or 1 << 30), settings.completion_tokens)
        )
        if not scripted.filler:
            completion = scripted.tokens()
        entry = Logged(
            arrived,
            headers.get("x-request-id"),
            200,
            prompt,
            completion,
            stream,
            self._key_ok(headers, api),
            model=str(request.get("model", "")),
            max_tokens=request.get("max_tokens"),
            tools=_offered(request.get("tools")),
            tool_calls=tuple(call.name for call in scripted.calls),
            api=api,
        )
        self.state.log.append(entry)
        try:
            if settings.require_key and not entry.key_ok:
                # Checked before the script, so a refused key does not use up a scripted answer.
                raise HttpError(401, "invalid_api_key", "invalid or expired API key")
            action = self.state.script.popleft() if self.state.script else Action()
            self._admit(entry, action)
            if settings.context_tokens is not None and prompt > settings.context_tokens:
                raise HttpError(
                    400,
                    "context_length_exceeded",
                    f"prompt is too long: {prompt} tokens > {settings.context_tokens} maximum",
                )
        except HttpError as exc:
            entry.status = exc.status
            raise
        state = self.state
        state.inflight += 1
        state.max_inflight = max(state.max_inflight, state.inflight)
        try:
            await asyncio.sleep(
                action.latency_s if action.latency_s is not None else settings.latency_s
            )
            answer = answer_words(completion) if scripted.filler else _pieces(scripted.text)
            if api is Api.ANTHROPIC:
                await self._anthropic(writer, request, entry, answer, action, scripted)
            elif stream:
                await self._stream(writer, request, entry, answer, action, scripted)
            else:
                reply = self._completion(request, entry, answer, scripted)
                await send_json(writer, 200, reply, {"x-model-version": settings.model_version})
        finally:
            state.inflight -= 1

    async def _embeddings(
        self, headers: dict[str, str], body: bytes, writer: asyncio.StreamWriter
    ) -> None:
        try:
            request = orjson.loads(body)
            raw = request["input"]
            inputs = [raw] if isinstance(raw, str) else [str(text) for text in raw]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise HttpError(400, "invalid_request", "body must be JSON with input") from None
        tokens = sum(math.ceil(len(text) / 4) for text in inputs)
        entry = Logged(
            time.monotonic(),
            headers.get("x-request-id"),
            200,
            tokens,
            0,
            False,
            self._key_ok(headers),
            model=str(request.get("model", "")),
            api=Api.EMBEDDINGS,
            inputs=len(inputs),
        )
        self.state.log.append(entry)
        settings = self.state.settings
        try:
            if settings.require_key and not entry.key_ok:
                raise HttpError(401, "invalid_api_key", "invalid or expired API key")
            action = self.state.script.popleft() if self.state.script else Action()
            self._admit(entry, action)
        except HttpError as exc:
            entry.status = exc.status
            raise
        await asyncio.sleep(
            action.latency_s if action.latency_s is not None else settings.latency_s
        )
        dims = settings.embedding_dims
        answer: dict[str, Any] = {
            "object": "list",
            "model": entry.model,
            "data": [
                {"object": "embedding", "index": i, "embedding": embedding_vector(text, dims)}
                for i, text in enumerate(inputs)
            ],
        }
        if not settings.omit_usage:
            answer["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
        await send_json(writer, 200, answer)

    def _key_ok(self, headers: dict[str, str], api: Api = Api.OPENAI) -> bool:
        auth = headers.get("authorization", "")
        key = auth[7:] if auth.lower().startswith("bearer ") else ""
        if api is Api.ANTHROPIC:
            key = headers.get("x-api-key", "")
        return self.state.keys.get(key, 0.0) > time.monotonic()

    def _admit(self, entry: Logged, action: Action) -> None:
        """Refusals after the key check: scripted errors, then limits, then chaos."""
        settings = self.state.settings
        if action.status != 200:
            extra = (
                {} if action.retry_after_s is None else {"retry-after": f"{action.retry_after_s:g}"}
            )
            raise HttpError(
                action.status, action.code or f"sim_{action.status}", "scripted error", extra
            )
        self._check_limits(entry)
        if settings.error_rate and self._rand.random() < settings.error_rate:
            # Anthropic's word for it is 529 overloaded_error.
            status = 529 if entry.api is Api.ANTHROPIC else 503
            raise HttpError(status, "overloaded", "simulated random overload")

    def _check_limits(self, entry: Logged) -> None:
        settings = self.state.settings
        if settings.rpm is None and settings.tpm is None:
            return
        since = entry.arrived - settings.window_s
        recent = [e for e in self.state.log[:-1] if e.arrived > since and e.status == 200]
        tokens = sum(e.prompt_tokens + e.completion_tokens for e in recent)
        over_r = settings.rpm is not None and len(recent) + 1 > settings.rpm
        over_t = (
            settings.tpm is not None
            and tokens + entry.prompt_tokens + entry.completion_tokens > settings.tpm
        )
        if over_r or over_t:
            raise HttpError(
                429,
                "rate_limit_exceeded",
                "simulated provider rate limit",
                {"retry-after": f"{settings.window_s:g}"},
            )

    def _completion(
        self, request: dict[str, Any], entry: Logged, answer: list[str], scripted: SimAnswer
    ) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(answer)}
        if scripted.calls:
            message["content"] = message["content"] or None
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in scripted.calls
            ]
        body: dict[str, Any] = {
            "id": "chatcmpl-sim-" + uuid.uuid4().hex[:12],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(request.get("model", "sim")),
            "choices": [{"index": 0, "finish_reason": scripted.finish, "message": message}],
        }
        if not self.state.settings.omit_usage:
            body["usage"] = _usage(entry)
        return body

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        request: dict[str, Any],
        entry: Logged,
        answer: list[str],
        action: Action,
        scripted: SimAnswer,
    ) -> None:
        settings = self.state.settings
        writer.write(
            head(
                200,
                {
                    "content-type": "text/event-stream",
                    "cache-control": "no-cache",
                    "transfer-encoding": "chunked",
                    "x-model-version": settings.model_version,
                },
            )
        )
        model = str(request.get("model", "sim"))
        await chunk(writer, event(model, {"role": "assistant", "content": ""}))
        await asyncio.sleep(settings.first_token_s)
        gap = 1 / settings.token_rate if settings.token_rate > 0 else 0.0
        for i, word in enumerate(answer):
            if action.stall_after is not None and i == action.stall_after:
                await asyncio.sleep(action.stall_s)
            if gap and i:
                await asyncio.sleep(gap)
            await chunk(writer, event(model, {"content": word}))
        for delta in _call_deltas(scripted):
            await chunk(writer, event(model, {"tool_calls": [delta]}))
        await chunk(writer, event(model, {}, finish=scripted.finish))
        include = (request.get("stream_options") or {}).get("include_usage")
        if include and not settings.omit_usage:
            await chunk(
                writer,
                b"data: "
                + orjson.dumps(
                    {
                        "object": "chat.completion.chunk",
                        "model": model,
                        "choices": [],
                        "usage": _usage(entry),
                    }
                )
                + b"\n\n",
            )
        await chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _anthropic(
        self,
        writer: asyncio.StreamWriter,
        request: dict[str, Any],
        entry: Logged,
        answer: list[str],
        action: Action,
        scripted: SimAnswer,
    ) -> None:
        settings = self.state.settings
        model = str(request.get("model", "sim"))
        usage = None if settings.omit_usage else _anthropic_usage(entry)
        if not request.get("stream"):
            body = simanthropic.message(model, "".join(answer), scripted, usage)
            await send_json(writer, 200, body, {"x-model-version": settings.model_version})
            return
        writer.write(
            head(
                200,
                {
                    "content-type": "text/event-stream",
                    "cache-control": "no-cache",
                    "transfer-encoding": "chunked",
                },
            )
        )
        start = simanthropic.message(model, "", SimAnswer(""), None)
        start |= {"content": [], "stop_reason": None}
        start["usage"] = {"input_tokens": entry.prompt_tokens, "output_tokens": 1}
        if settings.omit_usage:
            del start["usage"]
        await chunk(writer, simanthropic.sse("message_start", {"message": start}))
        await asyncio.sleep(settings.first_token_s)
        await chunk(writer, simanthropic.sse("ping", {}))
        gap = 1 / settings.token_rate if settings.token_rate > 0 else 0.0
        words = [word for word in answer if word]
        stall = (action.stall_after, action.stall_s)
        if not await simanthropic.stream_blocks(
            writer, words, scripted, gap, stall, action.error_after
        ):
            writer.write(b"0\r\n\r\n")  # the error event ended the answer
            await writer.drain()
            return
        out = None if settings.omit_usage else entry.completion_tokens
        await chunk(writer, simanthropic.stop_delta(scripted, out))
        await chunk(writer, simanthropic.sse("message_stop", {}))
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def _anthropic_usage(entry: Logged) -> dict[str, int]:
    return {"input_tokens": entry.prompt_tokens, "output_tokens": entry.completion_tokens}


def embedding_vector(text: str, dims: int) -> list[float]:
    """The simulator's embedding of ``text``: deterministic, in [-1, 1), from its SHA-256."""
    seed = hashlib.sha256(text.encode()).digest()
    while len(seed) < 2 * dims:
        seed += hashlib.sha256(seed).digest()
    return [int.from_bytes(seed[2 * i : 2 * i + 2], "big") / 32768 - 1 for i in range(dims)]


def answer_words(count: int) -> list[str]:
    return [("" if i == 0 else " ") + _WORDS[i % len(_WORDS)] for i in range(count)]


def _pieces(text: str) -> list[str]:
    """A scripted text as stream tokens: its words, each with the space before it."""
    words = text.split(" ")
    return [("" if i == 0 else " ") + word for i, word in enumerate(words)]


def _call_deltas(scripted: SimAnswer) -> list[dict[str, Any]]:
    """Tool calls as a stream sends them: id and name first, then arguments in pieces."""
    deltas: list[dict[str, Any]] = []
    for index, call in enumerate(scripted.calls):
        deltas.append(
            {
                "index": index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
        )
        for start in range(0, len(call.arguments), 8):
            piece = call.arguments[start : start + 8]
            deltas.append({"index": index, "function": {"arguments": piece}})
    return deltas


def _offered(tools: Any) -> tuple[str, ...]:
    names: list[str] = []
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict):
            function = tool.get("function")
            name = function.get("name") if isinstance(function, dict) else tool.get("name")
            names.append(str(name))
    return tuple(names)


def _usage(entry: Logged) -> dict[str, int]:
    return {
        "prompt_tokens": entry.prompt_tokens,
        "completion_tokens": entry.completion_tokens,
        "total_tokens": entry.prompt_tokens + entry.completion_tokens,
    }


class SimulatorThread:
    """The simulator on its own event loop in a background thread (tests, the demo):
    timing of the code under test is not disturbed by the simulator's work, and the
    server outlives any one test loop. ``call`` runs a function on the simulator's loop."""

    def __init__(self, settings: SimSettings | None = None) -> None:
        self.sim = Simulator(settings)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="model-simulator", daemon=True
        )

    def __enter__(self) -> SimulatorThread:
        self._thread.start()
        self.run(self.sim.start())
        return self

    def __exit__(self, *exc: object) -> None:
        self.run(self.sim.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    @property
    def url(self) -> str:
        return self.sim.url

    def run(self, coro: Awaitable[T]) -> T:
        async def _wrapped() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(_wrapped(), self._loop).result(timeout=30)

    def call(self, fn: Callable[[], T]) -> T:
        async def _call() -> T:
            return fn()

        return self.run(_call())

    def log(self) -> list[Logged]:
        return self.call(lambda: list(self.sim.state.log))
