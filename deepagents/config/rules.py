"""A small, safe rule language for routing, compiled once at load. Never ``eval``.

A rule is a mapping from a field path to a condition; all must hold::

    match:
      intent: trade                      # equals
      payload.urgent: true
      payload.quantity: {gte: 100}
      tenant: {in: [acme, globex]}
      payload.note: {exists: true}

Paths: ``intent``, ``tenant``, ``priority``, ``payload.<key>[.<key>...]``.
Operators: eq, ne, in, not_in, gt, gte, lt, lte, exists.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from deepagents.contract.task import Task
from deepagents.errors import DeepAgentsError, ErrorCode

Predicate = Callable[[Task], bool]

_MISSING = object()
_TOP_FIELDS = frozenset({"intent", "tenant", "priority"})
_MAX_PATH_DEPTH = 8
_MAX_LIST = 1_000
_Scalar = (str, int, float, bool, type(None))

_ORDER_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}


class RuleError(DeepAgentsError, ValueError):
    """A rule that cannot be compiled; the message names the path and the reason."""

    code = ErrorCode.CONFIG_ERROR


def _getter(path: str) -> Callable[[Task], Any]:
    parts = path.split(".")
    if parts[0] in _TOP_FIELDS and len(parts) == 1:
        name = parts[0]
        return lambda task: getattr(task, name)
    if parts[0] != "payload" or len(parts) < 2 or not all(parts):
        raise RuleError(f"{path!r}: a path is intent, tenant, priority or payload.<key>[.<key>...]")
    if len(parts) - 1 > _MAX_PATH_DEPTH:
        raise RuleError(f"{path!r}: at most {_MAX_PATH_DEPTH} keys deep")
    keys = parts[1:]

    def get(task: Task) -> Any:
        value: Any = task.payload
        for key in keys:
            if not isinstance(value, Mapping):
                return _MISSING
            value = value.get(key, _MISSING)
            if value is _MISSING:
                return _MISSING
        return value

    return get


def _scalar(path: str, value: Any) -> Any:
    if not isinstance(value, _Scalar):
        raise RuleError(
            f"{path}: expected a number, string, boolean or null, got {type(value).__name__}"
        )
    return value


def _ordered(left: Any, right: Any, op: Callable[[Any, Any], bool]) -> bool:
    if isinstance(left, bool) or isinstance(right, bool):
        return False
    numbers = (int, float)
    if isinstance(left, numbers) and isinstance(right, numbers):
        return op(left, right)
    if isinstance(left, str) and isinstance(right, str):
        return op(left, right)
    return False


def _condition(path: str, spec: Any) -> Callable[[Any], bool]:
    if not isinstance(spec, Mapping):
        expected = _scalar(path, spec)
        return lambda value: value is not _MISSING and value == expected
    if len(spec) != 1:
        raise RuleError(f"{path}: a condition has exactly one operator, got {sorted(spec)}")
    ((op, arg),) = spec.items()
    if op in ("eq", "ne"):
        expected = _scalar(f"{path}.{op}", arg)
        if op == "eq":
            return lambda value: value is not _MISSING and value == expected
        return lambda value: value is _MISSING or value != expected
    if op in ("in", "not_in"):
        if not isinstance(arg, list) or len(arg) > _MAX_LIST:
            raise RuleError(f"{path}.{op}: expected a list of at most {_MAX_LIST} values")
        choices = [_scalar(f"{path}.{op}", item) for item in arg]
        if op == "in":
            return lambda value: value is not _MISSING and value in choices
        return lambda value: value is _MISSING or value not in choices
    if op in _ORDER_OPS:
        bound = _scalar(f"{path}.{op}", arg)
        if not isinstance(bound, int | float | str) or isinstance(bound, bool):
            raise RuleError(f"{path}.{op}: expected a number or a string")
        fn = _ORDER_OPS[op]
        return lambda value: value is not _MISSING and _ordered(value, bound, fn)
    if op == "exists":
        if not isinstance(arg, bool):
            raise RuleError(f"{path}.exists: expected true or false")
        return lambda value: (value is not _MISSING and value is not None) is arg
    raise RuleError(
        f"{path}: unknown operator {op!r} (use eq, ne, in, not_in, gt, gte, lt, lte, exists)"
    )


def compile_match(match: Mapping[str, Any]) -> Predicate:
    """Compile a ``match`` mapping into a predicate over a Task."""
    if not isinstance(match, Mapping) or not match:
        raise RuleError("match must be a non-empty mapping of path to condition")
    checks: list[tuple[Callable[[Task], Any], Callable[[Any], bool]]] = []
    for path, spec in match.items():
        if not isinstance(path, str):
            raise RuleError(f"{path!r}: paths are strings")
        checks.append((_getter(path), _condition(path, spec)))

    def predicate(task: Task) -> bool:
        return all(test(get(task)) for get, test in checks)

    return predicate
