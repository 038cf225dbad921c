"""A form for a question's answer, generated from its JSON Schema, and the answer read back
from the posted form. An object schema gets one field per property (booleans and enums as a
choice, numbers and strings as inputs, anything else as JSON); any other schema gets one
JSON field. The answer is still checked against the schema by ``Orchestrator.reply``: the
form only turns text into typed values."""

from __future__ import annotations

import html
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

ANSWER = "answer"  # the one field of a schema that is not an object
_PREFIX = "f."  # form names of the fields: never clash with the form's own (csrf)


class Kind(StrEnum):
    BOOLEAN = "boolean"
    INTEGER = "integer"
    NUMBER = "number"
    STRING = "string"
    CHOICE = "choice"
    JSON = "json"


@dataclass(frozen=True, slots=True)
class FormField:
    name: str
    kind: Kind
    required: bool
    title: str
    description: str = ""
    choices: tuple[Any, ...] = ()


def _kind(prop: dict[str, Any]) -> tuple[Kind, tuple[Any, ...]]:
    if isinstance(prop.get("enum"), list):
        return Kind.CHOICE, tuple(prop["enum"])
    kind = prop.get("type")
    if kind in ("boolean", "integer", "number", "string"):
        return Kind(kind), ()
    return Kind.JSON, ()


def fields_of(schema: dict[str, Any]) -> list[FormField]:
    props = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(props, dict):
        return [FormField(ANSWER, Kind.JSON, True, "answer (JSON)")]
    required = set(schema.get("required") or ())
    out = []
    for name, prop in props.items():
        prop = prop if isinstance(prop, dict) else {}
        kind, choices = _kind(prop)
        title = str(prop.get("title") or name)
        out.append(
            FormField(
                str(name), kind, name in required, title, str(prop.get("description", "")), choices
            )
        )
    return out


def _input(field: FormField, value: str) -> str:
    name = html.escape(_PREFIX + field.name)
    v = html.escape(value)
    need = " required" if field.required else ""
    if field.kind in (Kind.BOOLEAN, Kind.CHOICE):
        options = ("true", "false") if field.kind is Kind.BOOLEAN else field.choices
        shown = [("", "choose…")] + [
            (o if isinstance(o, str) else orjson.dumps(o).decode(),) * 2 for o in options
        ]
        opts = "".join(
            f'<option value="{html.escape(str(k))}"{" selected" if str(k) == value else ""}>'
            f"{html.escape(str(label))}</option>"
            for k, label in shown
        )
        return f'<select id="{name}" name="{name}"{need}>{opts}</select>'
    if field.kind is Kind.JSON:
        return f'<textarea id="{name}" name="{name}" rows="4"{need}>{v}</textarea>'
    kind = "number" if field.kind in (Kind.INTEGER, Kind.NUMBER) else "text"
    step = ' step="1"' if field.kind is Kind.INTEGER else ' step="any"' * (kind == "number")
    return f'<input id="{name}" name="{name}" type="{kind}"{step} value="{v}"{need}>'


def render_fields(fields: list[FormField], values: dict[str, str], errors: dict[str, str]) -> str:
    """The fields as HTML, each with its label and, when the last answer broke it, its error
    (``data-error`` names the field, for tests and styles)."""
    parts = []
    for field in fields:
        name = html.escape(_PREFIX + field.name)
        error = errors.get(field.name)
        shown = (
            f'<p class="error" data-error="{html.escape(field.name)}">{html.escape(error)}</p>'
            if error
            else ""
        )
        hint = f"<small>{html.escape(field.description)}</small>" if field.description else ""
        star = " *" if field.required else ""
        parts.append(
            f'<div class="field{" invalid" if error else ""}">'
            f'<label for="{name}">{html.escape(field.title)}{star}</label>'
            f"{_input(field, values.get(field.name, ''))}{hint}{shown}</div>"
        )
    return "".join(parts)


def shown_values(fields: list[FormField], value: Any) -> dict[str, str]:
    """A value as the form's texts (the proposal an edit starts from)."""
    if len(fields) == 1 and fields[0].name == ANSWER and fields[0].kind is Kind.JSON:
        return {ANSWER: orjson.dumps(value).decode()}
    if not isinstance(value, dict):
        return {}
    out = {}
    for field in fields:
        if field.name not in value:
            continue
        v = value[field.name]
        if field.kind in (Kind.STRING, Kind.CHOICE) and isinstance(v, str):
            out[field.name] = v
        else:
            out[field.name] = orjson.dumps(v).decode()
    return out


def posted_values(form: dict[str, str]) -> dict[str, str]:
    return {k[len(_PREFIX) :]: v for k, v in form.items() if k.startswith(_PREFIX)}


def _typed(field: FormField, text: str) -> Any:
    """The value of one field; ``ValueError`` naming what is wrong with the text."""
    if field.kind is Kind.BOOLEAN:
        if text not in ("true", "false"):
            raise ValueError("choose true or false")
        return text == "true"
    if field.kind is Kind.INTEGER:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a whole number") from None
    if field.kind is Kind.NUMBER:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number") from None
    if field.kind is Kind.CHOICE:
        for choice in field.choices:
            if text == (choice if isinstance(choice, str) else orjson.dumps(choice).decode()):
                return choice
        raise ValueError("choose one of the options")
    if field.kind is Kind.JSON:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            raise ValueError("not valid JSON") from None
    return text


def answer_from(fields: list[FormField], values: dict[str, str]) -> tuple[Any, dict[str, str]]:
    """The answer the form holds, and an error per field whose text has no value of its
    type. An empty optional field is left out."""
    if len(fields) == 1 and fields[0].name == ANSWER and fields[0].kind is Kind.JSON:
        try:
            return _typed(fields[0], values.get(ANSWER, "")), {}
        except ValueError as exc:
            return None, {ANSWER: str(exc)}
    answer: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for field in fields:
        text = values.get(field.name, "")
        if text == "" and field.kind is not Kind.STRING:
            if field.required:
                errors[field.name] = "required"
            continue
        if text == "" and not field.required:
            continue
        try:
            answer[field.name] = _typed(field, text)
        except ValueError as exc:
            errors[field.name] = str(exc)
    return answer, errors
