"""Questions answered the Agent Inbox way: the agent proposes a value and says which of
four actions a person may take, ``accept`` it, ``edit`` it, ``respond`` in words instead,
or ``ignore`` the question (docs/human-replies.md, "Actions").

Such a question stores an *envelope* as its answer schema: an object with ``action`` (one
of the allowed ones) and, for ``edit``, ``value`` (the agent's schema) or, for ``respond``,
``value`` (text). The allowed actions and the proposal ride in the same document under
``x-deepagents-inbox``, a keyword JSON Schema ignores, so every reply path (HTTP, CLI,
console, ``Orchestrator.reply``) checks an answer with no change, and a client reads the
choices where it reads the schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from deepagents.errors import ConfigError

M = TypeVar("M", bound=BaseModel)
INBOX_KEY = "x-deepagents-inbox"
MAX_RESPONSE_CHARS = 10_000


class InboxAction(StrEnum):
    ACCEPT = "accept"  # take the proposal as it is
    EDIT = "edit"  # take the proposal as the person changed it
    RESPOND = "respond"  # no value: the person answers in words instead
    IGNORE = "ignore"  # the person declines to act on the question


@dataclass(frozen=True, slots=True)
class InboxAnswer(Generic[M]):
    """What ``ctx.ask(..., actions=...)`` returns: the action, the value (accept: the
    proposal; edit: the edited value; a timeout with ``on_timeout="default"``: the default,
    action ``ignore``), the text of a ``respond``."""

    action: InboxAction
    value: M | None = None
    response: str | None = None


@dataclass(frozen=True, slots=True)
class Inbox:
    """The inbox part of a stored answer schema."""

    actions: tuple[InboxAction, ...]
    proposal: Any
    schema: dict[str, Any]  # the agent's own schema, for the edit


def actions_of(actions: Sequence[InboxAction | str]) -> tuple[InboxAction, ...]:
    """The actions in a stable order, each once; ``ConfigError`` for an unknown one."""
    try:
        chosen = {InboxAction(a) for a in actions}
    except ValueError:
        known = ", ".join(a.value for a in InboxAction)
        raise ConfigError(f"ask(actions=...) takes {known}; not {list(actions)!r}") from None
    if not chosen:
        raise ConfigError("ask(actions=...) needs at least one action")
    return tuple(a for a in InboxAction if a in chosen)


def envelope_schema(
    schema: dict[str, Any], actions: tuple[InboxAction, ...], proposal: Any
) -> dict[str, Any]:
    """The answer schema of a question with actions (``schema`` is the agent's)."""
    inner = dict(schema)
    defs = inner.pop("$defs", None)  # refs (#/$defs/...) resolve against the envelope's root
    rules: list[dict[str, Any]] = []
    if InboxAction.EDIT in actions:
        rules.append(_when(InboxAction.EDIT, inner))
    if InboxAction.RESPOND in actions:
        text = {"type": "string", "minLength": 1, "maxLength": MAX_RESPONSE_CHARS}
        rules.append(_when(InboxAction.RESPOND, text))
    envelope: dict[str, Any] = {
        "type": "object",
        "properties": {"action": {"enum": [a.value for a in actions]}, "value": {}},
        "required": ["action"],
        "additionalProperties": False,
        INBOX_KEY: {"actions": [a.value for a in actions], "proposal": proposal, "schema": schema},
    }
    if rules:
        envelope["allOf"] = rules
    if defs is not None:
        envelope["$defs"] = defs
    return envelope


def _when(action: InboxAction, value: dict[str, Any]) -> dict[str, Any]:
    return {
        "if": {"properties": {"action": {"const": action.value}}},
        "then": {"properties": {"value": value}, "required": ["value"]},
    }


def inbox_of(schema: dict[str, Any]) -> Inbox | None:
    """The inbox part of a stored answer schema; None for a plain question."""
    doc = schema.get(INBOX_KEY)
    if not isinstance(doc, dict):
        return None
    try:
        actions = actions_of(doc.get("actions") or ())
    except ConfigError:
        return None
    inner = doc.get("schema")
    return Inbox(actions, doc.get("proposal"), inner if isinstance(inner, dict) else {})


def answer_of(envelope: Any, schema: type[M], proposal: M | None) -> InboxAnswer[M]:
    """The ``InboxAnswer`` of a stored reply (already checked against the envelope)."""
    if not isinstance(envelope, dict):
        raise ValueError("not an object")
    action = InboxAction(str(envelope.get("action")))
    if action is InboxAction.ACCEPT:
        return InboxAnswer(action, proposal)
    if action is InboxAction.EDIT:
        return InboxAnswer(action, schema.model_validate(envelope.get("value")))
    if action is InboxAction.RESPOND:
        return InboxAnswer(action, response=str(envelope.get("value")))
    return InboxAnswer(action)


__all__ = [
    "INBOX_KEY",
    "Inbox",
    "InboxAction",
    "InboxAnswer",
    "actions_of",
    "answer_of",
    "envelope_schema",
    "inbox_of",
]
