"""The submit-and-wait answer (``routes_tasks.finished_view``): the Result without its task
id, the task's state from its outcome (dead for a dead letter), an error's code and message
kept as the agent gave them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from deepagents.contract.result import ErrorInfo, Result, ResultMetrics, ResultStatus
from deepagents.errors import ErrorCode
from deepagents.gateway.routes_tasks import finished_view
from deepagents.orchestrator import TaskHandle

RESULTS = [
    Result(task_id="t-1", output={"text": "hello"}),
    Result(
        task_id="t-1",
        status=ResultStatus.PARTIAL,
        output=[1, 2.5, None, "x"],
        degraded=True,
        metrics=ResultMetrics(latency_ms=1.5, queue_ms=0.25, tokens_used=7, risk_score=0.9),
        agent="echo",
        agent_version="1.0.0",
        finished_at=datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC),
    ),
    Result.failed(ErrorCode.DEAD_LETTERED, "three attempts failed", task_id="t-1"),
    Result.failed(ErrorCode.RESULT_TIMEOUT, "slow"),
]


@pytest.mark.parametrize("result", RESULTS)
def test_the_answer_is_the_result_without_its_task_id(result: Result) -> None:
    handle = TaskHandle("t-1", "echo", "p2", 0, False, None)  # type: ignore[arg-type]
    document: dict[str, Any] = finished_view(handle, result).model_dump(mode="json")
    assert (document["task_id"], document["agent"], document["tier"]) == ("t-1", "echo", "p2")
    assert "task_id" not in document["result"]
    expected = orjson.loads(result.model_dump_json())
    del expected["task_id"]
    assert document["result"] == expected | {"metrics": expected["metrics"] or {}}
    dead = result.error is not None and result.error.code == ErrorCode.DEAD_LETTERED
    assert document["state"] == ("dead" if dead else "done")


def test_an_error_keeps_its_code_and_message() -> None:
    result = Result(status=ResultStatus.FAILED, error=ErrorInfo(code="newer_code", message="m"))
    handle = TaskHandle("t-2", "echo", "p0", 3, False, None)  # type: ignore[arg-type]
    assert finished_view(handle, result).model_dump(mode="json")["result"]["error"] == {
        "code": "newer_code",
        "message": "m",
    }
