"""Scheduling layer, consumer side: the worker runtime."""

from deepagents.worker.assignment import Assignment, Upstream
from deepagents.worker.worker import Worker

__all__ = ["Assignment", "Upstream", "Worker"]
