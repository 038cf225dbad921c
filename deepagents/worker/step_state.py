"""A long-running agent's checkpointed state: restored (and migrated) at the start of a
delivery, encoded at each checkpoint.

A checkpoint written under another agent version goes through the agent's
``migrate_state(from_version, state)`` first. State that cannot be decoded, migrated or
validated raises ``StateIncompatible``: the task is dead-lettered, never retried in a loop
that would fail the same way each time.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from deepagents.contract.agent import AgentContract
from deepagents.errors import StateIncompatible, StateTooLarge, StepError

STATE, VERSION = "state", "state_version"


def fresh_state(agent: AgentContract) -> BaseModel:
    model = agent.state_model
    if model is None:
        raise StepError(f"{agent.name} declares no state_model: ctx.state needs one")
    try:
        return model()
    except ValidationError as exc:
        raise StepError(
            f"{agent.name}'s state_model needs a default for every field: {exc}"
        ) from exc


def restore_state(agent: AgentContract, body: bytes, version: str) -> BaseModel:
    """The state a checkpoint holds, migrated from ``version`` when it is not the agent's."""
    model = agent.state_model
    if model is None:  # the agent dropped its state model: the checkpoint is unused
        return BaseModel()
    where = f"checkpoint written by {agent.name} {version}"
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise StateIncompatible(f"{where} is not JSON: {exc}") from exc
    if version != agent.version:
        try:
            raw = agent.migrate_state(version, raw)
        except Exception as exc:
            raise StateIncompatible(
                f"{where}: migrate_state to {agent.version} failed: {type(exc).__name__}: {exc}"
            ) from exc
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise StateIncompatible(
            f"{where} does not fit {agent.name} {agent.version}'s state_model "
            f"({model.__name__}): {exc}"
        ) from exc


def encode_state(agent: AgentContract, state: Any, limit: int) -> bytes:
    model = agent.state_model
    if model is None or not isinstance(state, model):
        raise StepError(f"ctx.state must be a {getattr(model, '__name__', 'state_model')}")
    try:
        # Validated again: a field assigned a wrong value since (no validate_assignment).
        body = orjson.dumps(model.model_validate(state.model_dump()).model_dump(mode="json"))
    except (ValidationError, TypeError) as exc:
        raise StepError(f"{agent.name}'s state is not a valid {model.__name__}: {exc}") from exc
    if len(body) > limit:
        raise StateTooLarge(
            f"{agent.name}'s state is {len(body)} bytes encoded, over max_state_bytes "
            f"({limit}); the last checkpoint stays as it was"
        )
    return body
