"""Declaring a tool: its definition (what the model is told), its policy (what the runtime
may do with a call), and Python callables made into tools with ``@tool``.

A Python tool's input is a pydantic model, a JSON Schema, or its own signature (turned into
a pydantic model). Arguments are checked before the call as gateway input is: bounded JSON
first, then the schema. A parameter named ``idempotency_key`` is not part of the schema:
the runtime fills it (the step key inside a task with steps, see ``wrap.py``).
"""

from __future__ import annotations

import asyncio
import inspect
import typing
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from pydantic import BaseModel, ValidationError, create_model

from deepagents.config.models import BreakerConfig
from deepagents.contract.toolcalls import ToolDefinition
from deepagents.tools.bounds import DEFAULT_BOUNDS, JsonBounds, OutOfBounds, check_json
from deepagents.tools.errors import (
    InvalidToolArguments,
    ToolCallError,
    ToolFailed,
    ToolProtocolError,
)

IDEMPOTENCY_PARAM = "idempotency_key"
# Keywords of an outside schema not run here: Python's ``re`` is not linear time, so a
# hostile pattern could hang the worker; the tool's own server checks them.
_UNSAFE_KEYWORDS = frozenset({"pattern", "patternProperties", "format"})
# Keys whose value maps names to schemas (a property called "pattern" is no keyword), and
# keys whose value is data, not a schema.
_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "dependentSchemas"})
_VALUES = frozenset({"enum", "const", "default", "examples"})


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """What the runtime may do with a call of this tool.

    ``read_only`` and ``idempotent`` tools are retried (``retries`` times, with backoff from
    ``backoff_s`` doubling to ``backoff_max_s``); others run at most once per delivery.
    ``destructive`` marks a tool a person should approve (the approval middleware reads it).
    ``timeout_s`` caps one attempt; the task's deadline caps the whole call.
    """

    read_only: bool = False
    idempotent: bool = False
    destructive: bool = False
    timeout_s: float = 30.0
    retries: int = 2
    backoff_s: float = 0.1
    backoff_max_s: float = 2.0
    breaker: BreakerConfig = field(default_factory=BreakerConfig)

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.retries < 0 or self.backoff_s < 0:
            raise ValueError("timeout_s must be > 0, retries and backoff_s >= 0")
        if self.read_only and self.destructive:
            raise ValueError("a tool cannot be both read_only and destructive")

    @property
    def retryable(self) -> bool:
        return self.read_only or self.idempotent

    def attempts(self) -> int:
        return 1 + self.retries if self.retryable else 1

    def backoff(self, attempt: int) -> float:
        """The pause before attempt ``attempt + 1`` (``attempt`` counts from 1)."""
        return min(self.backoff_max_s, self.backoff_s * 2.0 ** (attempt - 1))


class Tool(ABC):
    """A tool the runtime can call: ``definition`` (name, description, JSON Schema of its
    arguments), ``policy``, and ``server`` (where it runs: ``python``, or an MCP server's
    name). Subclasses implement ``invoke``; ``wrap_tool_call`` is the way to call one."""

    definition: ToolDefinition
    policy: ToolPolicy
    server: str = "python"

    @property
    def name(self) -> str:
        return self.definition.name

    bounds: JsonBounds = DEFAULT_BOUNDS
    _validator: Any = None  # the schema's validator, built on first use

    def check_arguments(self, arguments: Any) -> dict[str, Any]:
        """The arguments as the tool receives them, or ``InvalidToolArguments``."""
        self.check_bounds(arguments)
        if self._validator is None:
            self._validator = schema_validator(self.definition.parameters)
        validate_schema(self._validator, arguments, self.name)
        return dict(arguments)

    def check_bounds(self, arguments: Any) -> None:
        if not isinstance(arguments, Mapping):
            raise InvalidToolArguments(f"{self.name}: arguments must be a JSON object")
        try:
            check_json(arguments, f"{self.name}'s arguments", self.bounds)
        except OutOfBounds as error:
            raise InvalidToolArguments(str(error)) from None

    @abstractmethod
    async def invoke(self, arguments: dict[str, Any], *, idempotency_key: str | None) -> Any:
        """Run the call once; return its JSON result or raise a ``ToolCallError``."""


# jsonschema is imported where a schema is first used, not with this module: the worker
# imports the toolkit at start, and tests/cli/test_startup_imports.py keeps jsonschema out of
# a worker that has no tool with a JSON Schema.
def schema_validator(schema: Mapping[str, Any]) -> Any:
    import jsonschema

    validator_cls = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft202012Validator
    )
    return validator_cls(schema)


def validate_schema(validator: Any, arguments: Any, tool: str) -> None:
    if validator.is_valid(arguments):
        return
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(arguments))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "arguments"
        raise InvalidToolArguments(f"{tool}: {where}: {error.message}"[:500])


def checked_schema(schema: Any, tool: str) -> dict[str, Any]:
    """An input schema from outside (an MCP server): a bounded JSON object schema that is a
    valid JSON Schema, without the keywords not run here. ``ToolProtocolError`` otherwise."""
    try:
        check_json(schema, f"the input schema of {tool}")
    except OutOfBounds as error:
        raise ToolProtocolError(str(error)) from None
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise ToolProtocolError(f"the input schema of {tool} is not an object schema")
    import jsonschema

    safe = _without_unsafe(schema)
    validator_cls = jsonschema.validators.validator_for(
        safe, default=jsonschema.Draft202012Validator
    )
    try:
        validator_cls.check_schema(safe)
    except jsonschema.SchemaError as error:
        why = f"the input schema of {tool} is invalid: {error.message}"[:500]
        raise ToolProtocolError(why) from None
    return safe


def _without_unsafe(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy without the keywords not run here (depth is bounded by ``check_json``)."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _UNSAFE_KEYWORDS:
            continue
        if key in _VALUES:
            out[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _sub(inner) for name, inner in value.items()}
        else:
            out[key] = _sub(value)
    return out


def _sub(value: Any) -> Any:
    if isinstance(value, dict):
        return _without_unsafe(value)
    if isinstance(value, list):
        return [_sub(inner) for inner in value]
    return value


# Python tools ------------------------------------------------------------------------------


class FunctionTool(Tool):
    """A Python callable as a tool (made by ``@tool``). Sync functions run in a thread."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        description: str,
        input: type[BaseModel] | Mapping[str, Any] | None,
        policy: ToolPolicy,
    ) -> None:
        self.fn = fn
        self.policy = policy
        signature = inspect.signature(fn)
        self._wants_key = IDEMPOTENCY_PARAM in signature.parameters
        self._model: type[BaseModel] | None = None
        self._as_model = False  # fn takes the model instance, not its fields
        if isinstance(input, type) and issubclass(input, BaseModel):
            self._model, self._as_model = input, True
            parameters = input.model_json_schema()
        elif isinstance(input, Mapping):
            parameters = checked_schema(dict(input), name)
        else:
            self._model = _signature_model(fn, name, signature)
            parameters = self._model.model_json_schema()
        self.definition = ToolDefinition(name, description, parameters)
        self.__doc__ = fn.__doc__

    def check_arguments(self, arguments: Any) -> dict[str, Any]:
        if self._model is None:  # a JSON Schema: checked as an outside tool's
            return super().check_arguments(arguments)
        self.check_bounds(arguments)  # the model validates what its schema says
        try:
            model = self._model.model_validate(arguments)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "arguments"
            raise InvalidToolArguments(f"{self.name}: {where}: {first['msg']}") from None
        if self._as_model:
            return {"__model__": model}
        return {key: getattr(model, key) for key in type(model).model_fields}

    async def invoke(self, arguments: dict[str, Any], *, idempotency_key: str | None) -> Any:
        kwargs = {IDEMPOTENCY_PARAM: idempotency_key} if self._wants_key else {}
        args = (arguments["__model__"],) if "__model__" in arguments else ()
        if not args:
            kwargs.update(arguments)
        try:
            if inspect.iscoroutinefunction(self.fn):
                value = await self.fn(*args, **kwargs)
            else:
                value = await asyncio.to_thread(self.fn, *args, **kwargs)
                if inspect.isawaitable(value):
                    value = await value
        except (asyncio.CancelledError, TimeoutError, ToolCallError):
            raise  # a tool may say how it failed: ToolUnavailable is retried when safe
        except Exception as error:  # the tool's own failure: the model reads it
            raise ToolFailed(f"{self.name}: {type(error).__name__}: {error}"[:2000]) from error
        return _as_json(value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The function itself, for tests and plain use."""
        return self.fn(*args, **kwargs)


def _as_json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


def _signature_model(
    fn: Callable[..., Any], name: str, signature: inspect.Signature
) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    hints = _hints(fn)
    for param in signature.parameters.values():
        if param.name == IDEMPOTENCY_PARAM:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {name}: *args and **kwargs cannot be described to a model")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, default)
    model: type[BaseModel] = create_model(f"{name}_arguments", **fields)
    return model


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except (NameError, TypeError):
        return {}


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    input: type[BaseModel] | Mapping[str, Any] | None = None,
    read_only: bool = False,
    idempotent: bool = False,
    destructive: bool = False,
    timeout_s: float = 30.0,
    retries: int = 2,
    policy: ToolPolicy | None = None,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    input: type[BaseModel] | Mapping[str, Any] | None = None,
    read_only: bool = False,
    idempotent: bool = False,
    destructive: bool = False,
    timeout_s: float = 30.0,
    retries: int = 2,
    policy: ToolPolicy | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a Python callable a ``Tool``: ``@tool`` or ``@tool(read_only=True, ...)``.

    The description defaults to the docstring; the input to the signature (or give a
    pydantic model, which the function then receives as its one argument, or a JSON Schema,
    whose properties it receives as keyword arguments)."""

    def make(fn: Callable[..., Any]) -> FunctionTool:
        chosen = policy or ToolPolicy(
            read_only=read_only,
            idempotent=idempotent,
            destructive=destructive,
            timeout_s=timeout_s,
            retries=retries,
        )
        return FunctionTool(
            fn,
            name=name or fn.__name__,
            description=description or inspect.cleandoc(fn.__doc__ or "") or fn.__name__,
            input=input,
            policy=chosen,
        )

    return make(fn) if fn is not None else make


ToolFunction = Callable[..., Any | Awaitable[Any]]
