"""HTTP/1.1 and SSE framing for the model simulator: just enough for httpx and curl."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from deepagents.errors import DeepAgentsError

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class HttpError(DeepAgentsError):
    """Answered as an OpenAI-style error body with this status and the provider's code."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.provider_code, self.headers = status, code, headers or {}


def event(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    return (
        b"data: "
        + orjson.dumps(
            {
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )
        + b"\n\n"
    )


def head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()


async def send_json(
    writer: asyncio.StreamWriter, status: int, body: Any, headers: dict[str, str] | None = None
) -> None:
    payload = orjson.dumps(body)
    fields = {
        "content-type": "application/json",
        "content-length": str(len(payload)),
        **(headers or {}),
    }
    writer.write(head(status, fields) + payload)
    await writer.drain()
