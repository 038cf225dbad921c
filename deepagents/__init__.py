"""deepagents: schedules work for AI agents over sharded, priority-tiered Redis Streams."""

from deepagents.config import Settings, load_config, load_settings
from deepagents.contract import AgentContract, ErrorCode, Result, ResultStatus, Task
from deepagents.contract.context import Delegation, TaskContext, current_context
from deepagents.errors import DeepAgentsError, InvalidInput, RetryableError
from deepagents.orchestrator import Orchestrator, TaskHandle
from deepagents.worker import Worker

__version__ = "0.1.0"  # the one source of the version: pyproject.toml reads it

__all__ = [
    "AgentContract",
    "DeepAgentsError",
    "Delegation",
    "ErrorCode",
    "InvalidInput",
    "Orchestrator",
    "Result",
    "ResultStatus",
    "RetryableError",
    "Settings",
    "Task",
    "TaskContext",
    "TaskHandle",
    "Worker",
    "__version__",
    "current_context",
    "load_config",
    "load_settings",
]
