"""Answer schemas: the JSON Schema a task's question stores, and how a reply is checked
against it.

The ``pattern`` and ``patternProperties`` keywords are matched with RE2 (``google-re2``),
not Python's backtracking ``re``: RE2 runs in time linear in the text whatever the
pattern, so no reply can hold the gateway's CPU (``^(\\w+\\s?)*$`` against 41 characters
kept a gateway at 100% under ``re``). RE2 refuses what it cannot match in
linear time (backreferences, lookaround): such a schema is refused when the agent asks,
by ``check_patterns``, never when a person answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from deepagents.errors import ConfigError

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

# jsonschema and RE2 are imported where a schema is first checked, not with this module: the
# worker imports it at start (to check a question's schema when the agent asks) and most
# workers never ask (tests/cli/test_startup_imports.py keeps them out of a worker's start).


@lru_cache(maxsize=1)
def _options() -> Any:
    import re2  # type: ignore[import-untyped]  # google-re2 ships no type hints

    options = re2.Options()
    options.log_errors = False  # a refused pattern is our error to report, not stderr noise
    options.max_mem = 8 << 20  # RE2's default: a pattern whose program exceeds it is refused
    return options


class UnsafePattern(ConfigError):
    """A pattern RE2 cannot compile (backreference, lookaround, too large, bad syntax)."""

    def __init__(self, where: str, pattern: str, reason: str) -> None:
        super().__init__(
            f"{where}: pattern /{pattern[:200]}/ is not supported by the linear-time "
            f"matcher (RE2): {reason}; use a pattern without backreferences or lookaround"
        )


@dataclass(frozen=True, slots=True)
class BadAnswer:
    """The first place a reply breaks its schema: a dotted JSON path, and why."""

    field: str
    reason: str


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    import re2

    return re2.compile(pattern, _options())


def _search(pattern: str, text: str) -> bool:
    import re2

    try:
        return _compiled(pattern).search(text) is not None
    except re2.error as exc:
        raise UnsafePattern("answer schema", pattern, _reason(exc)) from None


def _reason(exc: Exception) -> str:
    arg = exc.args[0] if exc.args else exc
    return arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)


def _pattern(validator: Any, patrn: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if isinstance(patrn, str) and isinstance(instance, str) and not _search(patrn, instance):
        from jsonschema.exceptions import ValidationError

        yield ValidationError(f"{instance[:100]!r} does not match {patrn[:200]!r}")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not isinstance(instance, dict) or not isinstance(patterns, dict):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(str(pattern), key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


_SAFE: dict[type[Any], type[Any]] = {}


def _safe_validator(schema: Any) -> Any:
    import jsonschema

    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls = _SAFE.get(base)
    if cls is None:
        keywords = {"pattern": _pattern, "patternProperties": _pattern_properties}
        cls = _SAFE[base] = jsonschema.validators.extend(base, keywords)  # type: ignore[no-untyped-call]
    return cls(schema)


def check_patterns(schema: Any, where: str = "schema") -> None:
    """Raise ``UnsafePattern`` for the first ``pattern`` or ``patternProperties`` key in
    ``schema`` (at any depth) that RE2 refuses."""
    import re2

    for path, pattern in _patterns(schema, where):
        try:
            _compiled(pattern)
        except re2.error as exc:
            raise UnsafePattern(path, pattern, _reason(exc)) from None


def _patterns(node: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield from _patterns(item, f"{path}[{i}]")
    elif isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}"
            if key == "pattern" and isinstance(value, str):
                yield here, value
            elif key == "patternProperties" and isinstance(value, dict):
                yield from ((here, str(p)) for p in value)
            yield from _patterns(value, here)


def first_error(answer: Any, schema: Any) -> BadAnswer | None:
    """The first field of ``answer`` that breaks ``schema``; None when it fits. Raises
    ``UnsafePattern`` if the schema holds a pattern RE2 refuses."""
    from jsonschema.exceptions import best_match

    error = best_match(_safe_validator(schema).iter_errors(answer))
    if error is None:
        return None
    path = list(error.absolute_path)
    if error.validator == "required" and isinstance(error.validator_value, list):
        # A missing property is named by itself, not by the object that lacks it.
        missing = [
            p
            for p in error.validator_value
            if isinstance(error.instance, dict) and p not in error.instance
        ]
        path += missing[:1]
    return BadAnswer(".".join(str(p) for p in path) or "answer", error.message)
