"""What a task's context offers its agent beyond the agent's own code, each opened per
delivery by its run (``execution.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from deepagents.worker.asking import Asks
from deepagents.worker.delegation import Delegations
from deepagents.worker.steps import StepBook


@dataclass(frozen=True, slots=True)
class ContextFeatures:
    """Durable steps (``ctx.step``, ``steps.py``), questions to a person (``ctx.ask``,
    ``asking.py``) and child tasks (``ctx.delegate``, ``delegation.py``)."""

    steps: StepBook
    asks: Asks
    delegations: Delegations
