"""Scheduling layer, consumer side: the worker runtime."""

from deepagents.worker.worker import Worker

__all__ = ["Worker"]
