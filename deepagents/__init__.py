"""deepagents: schedules work for AI agents over sharded, priority-tiered Redis Streams.

The names below are loaded on first use (PEP 562 ``__getattr__``): ``from deepagents import
Task`` loads the data contract, not the orchestrator, the worker and their dependencies, so
an agent's module, a client and the CLI start fast. On Python 3.15 and later the same
imports are lazy by ``__lazy_modules__`` (PEP 810); before, they are read only by type
checkers and IDEs.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from deepagents._internal.lazy import lazy_exports

__version__ = "0.1.0"  # the one source of the version: pyproject.toml reads it

# Each exported name and the module that defines it.
_EXPORTS: dict[str, str] = {
    "AgentContract": "deepagents.contract",
    "DeepAgentsError": "deepagents.errors",
    "Delegation": "deepagents.contract.context",
    "ErrorCode": "deepagents.contract",
    "InboxAction": "deepagents.contract.inbox",
    "InboxAnswer": "deepagents.contract.inbox",
    "InvalidInput": "deepagents.errors",
    "Orchestrator": "deepagents.orchestrator",
    "Result": "deepagents.contract",
    "ResultStatus": "deepagents.contract",
    "RetryableError": "deepagents.errors",
    "Settings": "deepagents.config",
    "Task": "deepagents.contract",
    "TaskContext": "deepagents.contract.context",
    "TaskHandle": "deepagents.orchestrator",
    "WebhookSignatureError": "deepagents.contract.webhooks",
    "Worker": "deepagents.worker",
    "current_context": "deepagents.contract.context",
    "load_config": "deepagents.config",
    "load_settings": "deepagents.config",
    "verify_signature": "deepagents.contract.webhooks",
}

__lazy_modules__ = frozenset(_EXPORTS.values())

if TYPE_CHECKING or sys.version_info >= (3, 15):
    from deepagents.config import Settings, load_config, load_settings
    from deepagents.contract import AgentContract, ErrorCode, Result, ResultStatus, Task
    from deepagents.contract.context import Delegation, TaskContext, current_context
    from deepagents.contract.inbox import InboxAction, InboxAnswer
    from deepagents.contract.webhooks import WebhookSignatureError, verify_signature
    from deepagents.errors import DeepAgentsError, InvalidInput, RetryableError
    from deepagents.orchestrator import Orchestrator, TaskHandle
    from deepagents.worker import Worker

__all__ = [
    "AgentContract",
    "DeepAgentsError",
    "Delegation",
    "ErrorCode",
    "InboxAction",
    "InboxAnswer",
    "InvalidInput",
    "Orchestrator",
    "Result",
    "ResultStatus",
    "RetryableError",
    "Settings",
    "Task",
    "TaskContext",
    "TaskHandle",
    "WebhookSignatureError",
    "Worker",
    "__version__",
    "current_context",
    "load_config",
    "load_settings",
    "verify_signature",
]


# Hidden from type checkers, which then see only the names imported above (a typo stays
# an error).
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS, __all__)
