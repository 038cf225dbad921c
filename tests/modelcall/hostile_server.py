"""A misbehaving OpenAI-compatible server for the limit tests (not the simulator's
well-behaved paths): HTTP/1.1 over asyncio streams with h11, on its own event loop in a
thread, on a free loopback port.

The first path segment of the base URL picks the behaviour, so one server serves every
model of a test (``server.url("big200")`` → ``http://127.0.0.1:<port>/big200/v1``):

- ``perchar<n>``: a plain answer whose ``usage`` reports ``n`` prompt tokens per character of
  the messages' contents (1 for CJK-like text, more than any tokenizer when n > 1) and
  ``max_tokens`` completion tokens; every arrival is logged with those tokens.
- ``big200`` / ``big500``: that status, then 50 MB of junk, chunked (no length announced).
- ``bigsse``: a 200 event stream whose first line is one 50 MB ``data:`` line.
- ``stall<n>``: a 200 event stream of ``n`` one-token content events, then silence.
- ``biglen``: a 200 announcing a 50 MB ``Content-Length``, then nothing (no body at all).
- ``hang<n>``: the first ``n`` requests get no answer at all (not even headers); the next
  are answered like ``perchar1``.
- ``late<ms>``: answered like ``perchar1``, headers and body after ``ms`` milliseconds.

A request to ``.../messages`` (the Anthropic provider) gets the same behaviour in the
Messages API's shapes: its answer body, its usage fields and its stream events.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import h11
import orjson

T = TypeVar("T")

BIG = 50 * 1024 * 1024
_CHUNK = b"x" * (256 * 1024)
_MODE = re.compile(r"^/([a-z]+)(\d*)/")


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float  # time.monotonic() when the request was complete
    mode: str
    tokens: int  # prompt + completion tokens the answer reports (0 when not answered)


def max_window_tokens(arrivals: list[Arrival], window_s: float) -> int:
    """The largest token total that arrived inside any window of ``window_s``."""
    ordered = sorted(arrivals, key=lambda a: a.at)
    worst = 0
    for i, first in enumerate(ordered):
        worst = max(worst, sum(a.tokens for a in ordered[i:] if a.at < first.at + window_s))
    return worst


class HostileServer:
    def __init__(self) -> None:
        self.arrivals: list[Arrival] = []
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self.port = 0

    def __enter__(self) -> HostileServer:
        self._thread.start()
        self._server = self._run(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._run(self._close_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.port}/{mode}/v1"

    def log(self, mode: str | None = None) -> list[Arrival]:
        with self._lock:
            return [a for a in self.arrivals if mode is None or a.mode == mode]

    def _run(self, coro: Awaitable[T]) -> T:
        async def wrapped() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrapped(), self._loop).result(timeout=30)

    async def _close_all(self) -> None:
        # On the server's own loop: ``Server.close`` from another thread raced a connection
        # that ended at that moment, both waking the server's waiters (a TypeError).
        if self._server is not None:
            self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                got = await _read_request(conn, reader)
                if got is None:
                    return
                target, body = got
                if not await self._answer(conn, reader, writer, target, body):
                    return
                if h11.MUST_CLOSE in (conn.our_state, conn.their_state):
                    return
                conn.start_next_cycle()
        except (ConnectionError, h11.ProtocolError):
            pass  # the client gave up mid-answer: what these tests provoke
        finally:
            writer.close()

    async def _answer(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        target: str,
        body: bytes,
    ) -> bool:
        """Answer one request; False when the connection is to be dropped."""
        anthropic = target.rstrip("/").endswith("/messages")
        match = _MODE.match(target)
        mode, number = (match.group(1), int(match.group(2) or 0)) if match else ("", 0)
        with self._lock:
            self._seen[mode] += 1
            seen = self._seen[mode]
        if mode == "hang" and seen <= number:
            self._note(mode, 0)
            await reader.read()  # until the client closes the connection
            return False
        if mode in ("big", "bigsse"):
            await self._junk(conn, writer, target)
            return False
        if mode == "stall":
            self._note(mode, number)
            headers = [("content-type", "text/event-stream")]
            writer.write(conn.send(h11.Response(status_code=200, headers=headers)))
            event = b'data: {"choices": [{"delta": {"content": "t"}}]}\n\n'
            if anthropic:
                event = _ANTHROPIC_DELTA
                writer.write(conn.send(h11.Data(data=_ANTHROPIC_START)))
            writer.write(conn.send(h11.Data(data=event * number)))
            await writer.drain()
            await reader.read()  # until the client gives up on the stalled stream
            return False
        if mode == "biglen":
            self._note(mode, 0)
            headers = [("content-type", "application/json"), ("content-length", str(BIG))]
            writer.write(conn.send(h11.Response(status_code=200, headers=headers)))
            await reader.read()  # until the client closes the connection
            return False
        if mode == "late":
            await asyncio.sleep(number / 1000)
        request = orjson.loads(body)
        per_char = number if mode == "perchar" else 1
        chars = sum(_chars(m.get("content")) for m in request["messages"])
        usage = {"prompt_tokens": chars * per_char, "completion_tokens": request["max_tokens"]}
        self._note(mode, usage["prompt_tokens"] + usage["completion_tokens"])
        answer = _message(usage) if anthropic else _completion(usage)
        await _send(conn, writer, 200, "application/json", orjson.dumps(answer))
        return True

    async def _junk(self, conn: h11.Connection, writer: asyncio.StreamWriter, target: str) -> None:
        self._note(target.split("/")[1], 0)
        status = 500 if target.startswith("/big500/") else 200
        kind = "text/event-stream" if target.startswith("/bigsse/") else "application/json"
        writer.write(conn.send(h11.Response(status_code=status, headers=[("content-type", kind)])))
        if kind == "text/event-stream":
            writer.write(conn.send(h11.Data(data=b"data: ")))
        for _ in range(BIG // len(_CHUNK)):
            writer.write(conn.send(h11.Data(data=_CHUNK)))
            await writer.drain()
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()

    def _note(self, mode: str, tokens: int) -> None:
        with self._lock:
            self.arrivals.append(Arrival(time.monotonic(), mode, tokens))


_ANTHROPIC_START = (
    b'event: message_start\ndata: {"type": "message_start", "message": {"model": "hostile",'
    b' "usage": {"input_tokens": 1, "output_tokens": 1}}}\n\n'
    b'event: content_block_start\ndata: {"type": "content_block_start", "index": 0,'
    b' "content_block": {"type": "text", "text": ""}}\n\n'
)
_ANTHROPIC_DELTA = (
    b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0,'
    b' "delta": {"type": "text_delta", "text": "t"}}\n\n'
)


def _chars(content: Any) -> int:
    """Characters of a message's text: a string (OpenAI) or text blocks (Anthropic)."""
    if isinstance(content, list):
        return sum(len(str(b.get("text", ""))) for b in content if isinstance(b, dict))
    return len(str(content or ""))


def _message(usage: dict[str, int]) -> dict[str, Any]:
    """The Messages API's answer, with its usage fields."""
    return {
        "type": "message",
        "role": "assistant",
        "model": "hostile",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "output_tokens": usage["completion_tokens"],
        },
    }


def _completion(usage: dict[str, int]) -> dict[str, Any]:
    return {
        "model": "hostile",
        "choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": usage,
    }


async def _read_request(
    conn: h11.Connection, reader: asyncio.StreamReader
) -> tuple[str, bytes] | None:
    target = ""
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(65536))
        elif isinstance(event, h11.Request):
            target = event.target.decode()
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return target, bytes(body)
        else:  # ConnectionClosed, or PAUSED after a close
            return None


async def _send(
    conn: h11.Connection, writer: asyncio.StreamWriter, status: int, kind: str, body: bytes
) -> None:
    headers = [("content-type", kind), ("content-length", str(len(body)))]
    writer.write(conn.send(h11.Response(status_code=status, headers=headers)))
    writer.write(conn.send(h11.Data(data=body)))
    writer.write(conn.send(h11.EndOfMessage()))
    await writer.drain()
