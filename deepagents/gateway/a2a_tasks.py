"""A2A's view of deepagents tasks (docs/gateway.md, "A2A"): a task hash as an A2A ``Task``
in the protocol's JSON form, and an A2A message's parts as a payload or an answer.

Documents are built as plain JSON here, not through the SDK's protobuf types: a protobuf
``Value`` holds every number as a double, and a payload's ``7`` would reach the agent as
``7.0``. The JSON-RPC layer (``a2a_edge.py``) checks each request against the SDK's types
before anything here reads it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from deepagents.contract.codec import decode_result
from deepagents.errors import DeepAgentsError, ErrorCode
from deepagents.orchestrator.replies import question_of

SUBMITTED = "TASK_STATE_SUBMITTED"
WORKING = "TASK_STATE_WORKING"
COMPLETED = "TASK_STATE_COMPLETED"
FAILED = "TASK_STATE_FAILED"
CANCELED = "TASK_STATE_CANCELED"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
REJECTED = "TASK_STATE_REJECTED"
TERMINAL = frozenset({COMPLETED, FAILED, CANCELED, REJECTED})
# A blocking SendMessage returns at these (A2A: a terminal or an interrupted state).
SETTLED = TERMINAL | {INPUT_REQUIRED}

_STATES = {
    "queued": SUBMITTED,
    "scheduled": SUBMITTED,
    "retrying": SUBMITTED,
    "running": WORKING,
    "waiting": INPUT_REQUIRED,
}


class PartsError(DeepAgentsError):
    """A message's parts cannot be read as a payload or an answer; says which part.
    ``unsupported``: a kind of content that is not read at all (a file, a URL, bytes)."""

    code = ErrorCode.VALIDATION_ERROR

    def __init__(self, message: str, *, unsupported: bool = False) -> None:
        super().__init__(message)
        self.unsupported = unsupported


def _now() -> str:
    return _iso(datetime.now(UTC))


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def agent_message(
    task_id: str, text: str, metadata: dict[str, Any] | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "messageId": f"{task_id}:status",
        "role": "ROLE_AGENT",
        "taskId": task_id,
        "contextId": task_id,
        "parts": [{"text": text}],
    }
    if metadata:
        message["metadata"] = metadata
    return message


def task_document(task_id: str, info: dict[str, Any]) -> dict[str, Any]:
    """The A2A ``Task`` of a task hash (``Orchestrator.lookup``). The context id is the task
    id: a deepagents task is its own conversation."""
    state, message, artifacts = _status(task_id, info)
    status: dict[str, Any] = {"state": state, "timestamp": _now()}
    if message is not None:
        status["message"] = message
    document: dict[str, Any] = {
        "id": task_id,
        "contextId": task_id,
        "status": status,
        "metadata": {"agent": info.get("agent", ""), "state": info.get("state") or "unknown"},
    }
    if artifacts:
        document["artifacts"] = artifacts
    return document


def state_of(document: dict[str, Any]) -> str:
    return str(document["status"]["state"])


def _status(
    task_id: str, info: dict[str, Any]
) -> tuple[str, dict[str, Any] | None, list[dict[str, Any]]]:
    raw = info.get("result")
    if not raw:
        state = _STATES.get(info.get("state") or "", WORKING)
        return state, _question(task_id, info) if state == INPUT_REQUIRED else None, []
    result = decode_result(raw)
    error = result.error
    artifacts = []
    if result.output is not None:
        artifacts = [
            {"artifactId": f"{task_id}:result", "name": "result", "parts": [_part(result.output)]}
        ]
    if error is None:
        return COMPLETED, None, artifacts
    text = f"{error.code}: {error.message}" if error.message else str(error.code)
    message = agent_message(task_id, text, {"code": str(error.code)})
    if error.code == ErrorCode.CANCELLED:
        return CANCELED, message, artifacts
    if error.code == ErrorCode.REJECTED:
        return REJECTED, message, artifacts
    return FAILED, message, artifacts


def _question(task_id: str, info: dict[str, Any]) -> dict[str, Any] | None:
    """``input-required``'s status message: the question, with its answer's JSON Schema
    and when the wait runs out in the metadata."""
    found = question_of(info)
    if found is None:
        return None
    due = datetime.fromtimestamp(found.due_ms / 1000, UTC)
    return agent_message(
        task_id,
        found.question,
        {
            "ask": found.ask,
            "answerSchema": found.schema,
            "timeoutAt": _iso(due),
            "onTimeout": found.on_timeout,
        },
    )


def _part(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"text": value, "mediaType": "text/plain"}
    return {"data": value, "mediaType": "application/json"}


def payload_of(parts: list[Any]) -> dict[str, Any]:
    """A new task's payload: the one data part's object, or ``{"text": ...}`` of the text
    parts. ``parts`` is the message's parts as JSON (already checked against the SDK's
    types, so each is an object holding one kind of content)."""
    value = _content(parts)
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        return {"text": value}
    raise PartsError(
        "message.parts: a task's payload is a data part holding a JSON object, or text parts"
    )


def answer_of(parts: list[Any]) -> Any:
    """An answer to the task's question: the one data part's value, or the text parts'
    text."""
    return _content(parts)


def _content(parts: list[Any]) -> Any:
    if not parts:
        raise PartsError("message.parts is empty: send a data part or text parts")
    data = [p["data"] for p in parts if isinstance(p, dict) and "data" in p]
    texts = [p["text"] for p in parts if isinstance(p, dict) and "text" in p]
    other = len(parts) - len(data) - len(texts)
    if other:
        raise PartsError(
            "message.parts: only data and text parts are read (no files, URLs or raw bytes)",
            unsupported=True,
        )
    if data and texts:
        raise PartsError("message.parts: send one data part, or text parts, not both")
    if len(data) > 1:
        raise PartsError(f"message.parts holds {len(data)} data parts: send one")
    if data:
        return data[0]
    return "\n".join(str(t) for t in texts)
