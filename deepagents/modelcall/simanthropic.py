"""The model simulator's Anthropic Messages API side: requests read into the OpenAI shape
the simulated model answers (``simscript``), and answers, stream events and errors written
the way the Messages API writes them."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson

from deepagents.modelcall.simscript import SimAnswer
from deepagents.modelcall.simwire import chunk

# The error type the Messages API gives each status.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def error_body(status: int, code: str | None, message: str) -> dict[str, Any]:
    """``code`` is kept when it is an Anthropic error type (a scripted ``billing_error``)."""
    kind = code if code and code.endswith("_error") else _ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def openai_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    """A Messages request's ``system`` and ``messages`` as OpenAI chat messages."""
    out: list[dict[str, Any]] = []
    system = request.get("system")
    if system:
        out.append({"role": "system", "content": _text(system)})
    for message in request["messages"]:
        role, content = message["role"], message.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        blocks = [b for b in content if isinstance(b, dict)]
        results = [b for b in blocks if b.get("type") == "tool_result"]
        for result in results:
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": result.get("tool_use_id"),
                    "content": _text(result.get("content")),
                }
            )
        uses = [b for b in blocks if b.get("type") == "tool_use"]
        text = _text([b for b in blocks if b.get("type") == "text"])
        if text or uses or not results:
            entry: dict[str, Any] = {"role": role, "content": text}
            if uses:
                entry["tool_calls"] = [
                    {"id": u.get("id"), "function": {"name": u.get("name")}} for u in uses
                ]
            out.append(entry)
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _stop_reason(answer: SimAnswer) -> str:
    return "tool_use" if answer.calls else "end_turn"


def _blocks(text: str, answer: SimAnswer) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for call in answer.calls:
        try:
            arguments: Any = orjson.loads(call.arguments)
        except orjson.JSONDecodeError:
            arguments = call.arguments  # sent as written, so a client's checks can be tested
        blocks.append(
            {"type": "tool_use", "id": _id(call.id), "name": call.name, "input": arguments}
        )
    return blocks


def _id(call_id: str) -> str:
    return "toolu_" + call_id.removeprefix("call_")


def message(
    model: str, text: str, answer: SimAnswer, usage: dict[str, int] | None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "msg_sim_" + uuid.uuid4().hex[:12],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(text, answer),
        "stop_reason": _stop_reason(answer),
        "stop_sequence": None,
    }
    if usage is not None:
        body["usage"] = usage
    return body


def sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\n".encode() + b"data: " + orjson.dumps({"type": kind, **data}) + b"\n\n"


async def stream_blocks(
    writer: asyncio.StreamWriter,
    words: list[str],
    answer: SimAnswer,
    gap_s: float,
    stall: tuple[int | None, float],
    error_after: int | None = None,
) -> bool:
    """The content blocks of a stream: text deltas word by word (paced and stalled as
    asked), then each tool use with its JSON in 8-character ``input_json_delta`` pieces.
    False when an ``error`` event (after ``error_after`` words) ended the stream."""
    index = 0
    if words:
        await chunk(
            writer,
            sse("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        )
        for i, word in enumerate(words):
            if stall[0] is not None and i == stall[0]:
                await asyncio.sleep(stall[1])
            if gap_s and i:
                await asyncio.sleep(gap_s)
            if error_after is not None and i == error_after:
                error = error_body(529, None, "simulated overload mid-stream")
                await chunk(writer, sse("error", {"error": error["error"]}))
                return False
            delta = {"type": "text_delta", "text": word}
            await chunk(writer, sse("content_block_delta", {"index": 0, "delta": delta}))
        await chunk(writer, sse("content_block_stop", {"index": 0}))
        index = 1
    for call in answer.calls:
        start = {"type": "tool_use", "id": _id(call.id), "name": call.name, "input": {}}
        await chunk(writer, sse("content_block_start", {"index": index, "content_block": start}))
        for at in range(0, len(call.arguments), 8):
            delta = {"type": "input_json_delta", "partial_json": call.arguments[at : at + 8]}
            await chunk(writer, sse("content_block_delta", {"index": index, "delta": delta}))
        await chunk(writer, sse("content_block_stop", {"index": index}))
        index += 1
    return True


def stop_delta(answer: SimAnswer, output_tokens: int | None) -> bytes:
    data: dict[str, Any] = {"delta": {"stop_reason": _stop_reason(answer), "stop_sequence": None}}
    if output_tokens is not None:
        data["usage"] = {"output_tokens": output_tokens}
    return sse("message_delta", data)
