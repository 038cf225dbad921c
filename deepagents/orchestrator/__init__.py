"""Scheduling layer, producer side: routing and admission."""

from deepagents.orchestrator.handle import TaskHandle
from deepagents.orchestrator.orchestrator import Orchestrator, submitter
from deepagents.orchestrator.replies import Question, Replied
from deepagents.orchestrator.routing import Route, Router

__all__ = ["Orchestrator", "Question", "Replied", "Route", "Router", "TaskHandle", "submitter"]
