"""The data contract: Task, Result and the agent contract. Pure: no I/O."""

from deepagents.contract.agent import AgentContract
from deepagents.contract.result import ErrorCode, ErrorInfo, Result, ResultMetrics, ResultStatus
from deepagents.contract.task import Task, new_task_id

__all__ = [
    "AgentContract",
    "ErrorCode",
    "ErrorInfo",
    "Result",
    "ResultMetrics",
    "ResultStatus",
    "Task",
    "new_task_id",
]
