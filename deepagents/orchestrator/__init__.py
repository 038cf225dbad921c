"""Scheduling layer, producer side: routing and admission.

Names are imported lazily: a process that needs one module of the package (the worker's
start checks the config's agent classes with ``routing``) does not load the orchestrator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepagents._internal.lazy import lazy_exports

if TYPE_CHECKING:
    from deepagents.orchestrator.handle import TaskHandle
    from deepagents.orchestrator.orchestrator import Orchestrator, submitter
    from deepagents.orchestrator.replies import Question, Replied
    from deepagents.orchestrator.routing import Route, Router

__all__ = ["Orchestrator", "Question", "Replied", "Route", "Router", "TaskHandle", "submitter"]

_WHERE = {
    "Orchestrator": "orchestrator",
    "Question": "replies",
    "Replied": "replies",
    "Route": "routing",
    "Router": "routing",
    "TaskHandle": "handle",
    "submitter": "orchestrator",
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        __name__, globals(), {name: f"{__name__}.{m}" for name, m in _WHERE.items()}, __all__
    )
