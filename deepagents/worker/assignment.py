"""Which part of an agent type's work one worker takes on, and where it submits work of
its own: what a worker's caller decides, beside the configuration."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from deepagents.config.placement import Placement
from deepagents.worker.asking import Escalate
from deepagents.worker.delegation import Parentage


@dataclass(frozen=True, slots=True)
class Assignment:
    """The streams this worker reads (``placement``: tiers and shards; None: all of the
    agent's), its slots per tier where they differ from the configuration's
    (``concurrency``), and its consumer name in the groups (None: the settings' own)."""

    placement: Placement | None = None
    concurrency: Mapping[str, int] = field(default_factory=dict)
    consumer: str | None = None


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where this worker submits tasks of its own, usually an orchestrator: escalations of
    unanswered questions (``escalate``, ``asking.py``) and child tasks, whose ends it carries
    to their parents (``parentage``, ``delegation.py``). None: it submits none."""

    escalate: Escalate | None = None
    parentage: Parentage | None = None


WHOLE = Assignment()  # every stream of the agent, the configuration's slots
NO_UPSTREAM = Upstream()
