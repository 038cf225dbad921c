"""Scheduling layer, producer side: routing and admission."""

from deepagents.orchestrator.handle import TaskHandle
from deepagents.orchestrator.orchestrator import Orchestrator
from deepagents.orchestrator.routing import Route, Router

__all__ = ["Orchestrator", "Route", "Router", "TaskHandle"]
