"""A remote service's answer, read as strictly as the gateway reads a tenant's body.

What a service returns becomes a task's result, which every later read encodes again
(orjson, 64-bit integers, finite numbers only). Issue 39: ``NaN``, ``Infinity`` or
``1e400`` in an answer's ``metrics`` were stored as null and every read of the task then
answered 500; an integer wider than 64 bits failed the commit with a traceback. Both are
refused here, as a protocol error of that task.

Secrets the worker sends (its configured headers, ``Authorization`` first) are masked in
every string of the answer: a service that echoes them in an error message, a problem's
detail or an output would otherwise hand them to the tenant reading the task.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import Any, NoReturn, TypeVar

import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError

from deepagents.errors import DeepAgentsError, ErrorCode, RemoteProtocolError
from deepagents.remote import wire
from deepagents.remote.errors import REDACTED, protocol_error

R = TypeVar("R", bound=BaseModel)
# A batch's answers in one validation: one pass over the list, not one call per answer.
_RUN_ANSWERS = TypeAdapter(list[wire.RunAnswer])

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what orjson encodes
# Where an integer outside 64 bits may be: a run of 19 digits. Looked for as a run of "0"s in
# the body with every digit made "0" and all else " ": two passes in C, where a regular
# expression took about ten times as long (loadtests/bench_answer_reading.py).
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_DIGITS = b"0" * 19
_STRICT = object()  # _quick's "not read: parse strictly"
# A header value shorter than this is not masked: it would mask ordinary words.
_MIN_SECRET = 8


class BadAnswer(DeepAgentsError, ValueError):
    """The answer is not JSON this worker can keep: the reason, for a protocol error."""

    code = ErrorCode.REMOTE_PROTOCOL_ERROR


def _quick(raw: bytes) -> Any:
    """The JSON as orjson reads it (C, several times faster than the strict parse), when it
    can only be what the strict parse would give: orjson refuses ``NaN``, ``Infinity``,
    numbers too large for a double and lone surrogates itself, and a body without a run
    of 19 digits holds no integer outside 64 bits (which orjson would read as a float).
    ``_STRICT`` otherwise: the strict parse decides.

    One difference: orjson reads nesting to 1,024 levels, the strict parse to about 990.
    Neither depth encodes (orjson writes 255 levels at most): a batch's size check refuses
    such an answer as its task's protocol error, and a one-call answer fails at the commit,
    as one nested 256 to 990 levels deep already did."""
    if _LONG_DIGITS not in raw.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return _STRICT


def parse_answer(raw: bytes) -> Any:
    """The answer's JSON; ``BadAnswer`` for invalid JSON, a non-finite number or an
    integer outside 64 bits."""
    doc = _quick(raw)
    return doc if doc is not _STRICT else strict_parse(raw)


def strict_parse(raw: bytes) -> Any:
    """``parse_answer`` without orjson's look first: the json module, refusing what a
    result cannot keep."""
    try:
        return json.loads(
            raw, parse_constant=_no_constant, parse_int=_int, parse_float=_finite_float
        )
    except BadAnswer:
        raise
    except RecursionError:
        raise BadAnswer("the answer is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadAnswer(f"not JSON ({str(exc)[:100]})") from None


class Refused:
    """A value the strict parse refuses (a non-finite number, an integer outside 64 bits),
    left in its place by ``parse_answers``: the answer that holds it fails alone."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def parse_answers(raw: bytes) -> tuple[Any, bool]:
    """As ``parse_answer``, but for a body of several answers: a value ``parse_answer``
    refuses becomes a ``Refused`` in its place, so that only the answer holding it fails
    (``refused_in``); and whether there may be one. Invalid JSON still fails the whole
    body. Read by orjson, there is none (``_quick``); read strictly, the answers are looked
    through (the strict parse may also leave a lone surrogate, which only orjson refuses:
    a caller checks each answer by encoding it)."""
    doc = _quick(raw)
    if doc is not _STRICT:
        return doc, False
    found: list[Refused] = []

    def refuse(read: Callable[[str], Any]) -> Callable[[str], Any]:
        def hook(text: str) -> Any:
            try:
                return read(text)
            except BadAnswer as exc:
                found.append(Refused(str(exc)))
                return found[-1]

        return hook

    try:
        doc = json.loads(
            raw,
            parse_constant=refuse(_no_constant),
            parse_int=refuse(_int),
            parse_float=refuse(_finite_float),
        )
    except RecursionError:
        raise BadAnswer("the answer is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadAnswer(f"not JSON ({str(exc)[:100]})") from None
    return doc, True


class ReadAnswers:
    """A batch's answers already read per task (the gRPC wire's JSON form): what
    ``parse_answers`` gives of an HTTP body, ``Refused`` values included."""

    __slots__ = ("items", "suspect")

    def __init__(self, items: list[Any], suspect: bool) -> None:
        self.items = items
        self.suspect = suspect


def read_json_answers(ids: list[str], docs: list[bytes | BadAnswer]) -> ReadAnswers:
    """Each task's answer out of its own JSON document (``docs[i]`` answers ``ids[i]``; a
    ``BadAnswer`` where it has none), as ``parse_answers`` reads a batch's body: a refused
    value, or a document that is not a JSON object, fails its task only. orjson looks first
    (fast); the strict parse decides."""
    items: list[Any] = [None] * len(docs)
    suspect = False
    objects: list[int] = []  # the documents orjson reads as objects: parsed together
    texts: list[bytes] = []  # and those documents
    for i, doc in enumerate(docs):
        if isinstance(doc, BadAnswer):
            items[i], suspect = {"json": Refused(f"json: {doc}")}, True
            continue
        try:
            is_object = isinstance(orjson.loads(doc), dict)
        except orjson.JSONDecodeError:
            is_object = False
        if is_object:
            objects.append(i)
            texts.append(doc)
        else:
            items[i], refused = _one_answer(doc)
            suspect = suspect or refused
    try:  # each is JSON alone: their concatenation cannot mix two answers
        together, refused = parse_answers(b"[" + b",".join(texts) + b"]")
    except BadAnswer:  # too deep for the strict parser: each alone, so one fails alone
        read = [_one_answer(text) for text in texts]
        together, refused = [item for item, _ in read], any(r for _, r in read)
    for i, item in zip(objects, together, strict=True):
        items[i] = item
    for item, task_id in zip(items, ids, strict=True):
        item["id"] = task_id  # the message's id, whatever the document says
    return ReadAnswers(items, suspect or refused)


def _one_answer(doc: bytes) -> tuple[dict[str, Any], bool]:
    """One answer's document read alone, strictly: the object, and whether it holds a
    refused value; or a ``Refused`` in its place."""
    try:
        value, refused = parse_answers(doc)
    except BadAnswer as exc:
        return {"json": Refused(f"json: {exc}")}, True
    if not isinstance(value, dict):
        return {"json": Refused("json: not a JSON object")}, True
    return value, refused


def refused_in(value: Any) -> str | None:
    """Why the first ``Refused`` value in ``value`` (parsed JSON) was refused; None if none."""
    if isinstance(value, Refused):
        return value.why
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            why = refused_in(item)
            if why is not None:
                return why
    return None


def _no_constant(name: str) -> NoReturn:
    raise BadAnswer(f"{name} is not a JSON number; send finite numbers only")


def _int(text: str) -> int:
    if len(text.lstrip("-")) > 20:
        raise BadAnswer(f"integer {text[:24]}… is outside 64 bits")
    value = int(text)
    if not _INT_MIN <= value <= _INT_MAX:
        raise BadAnswer(f"integer {text} is outside 64 bits")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadAnswer(f"number {text[:24]} is out of range (not finite as a double)")
    return value


class SecretMask:
    """Replaces each of a set of secret values wherever it occurs in a string."""

    def __init__(self, secrets: Iterable[str]) -> None:
        found: set[str] = set()
        for secret in secrets:
            found.add(secret)
            # "Bearer abc…": the token alone is as secret as the header's whole value.
            found.update(part for part in secret.split() if len(part) >= _MIN_SECRET)
        # Longest first: a value that holds another is masked whole.
        self.secrets = sorted((s for s in found if len(s) >= _MIN_SECRET), key=len, reverse=True)

    def text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value

    def tree(self, value: Any) -> Any:
        """``value`` (parsed JSON) with every string masked, keys included."""
        if not self.secrets:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.tree(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k): self.tree(v) for k, v in value.items()}
        return value


def validated(step: str, model: type[R], doc: Any, mask: SecretMask, raw: bytes | None = None) -> R:
    """A parsed answer as ``model``, the worker's secrets masked in its strings;
    ``RemoteProtocolError`` saying where it does not match the schema."""
    doc = mask.tree(doc)
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        where = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['type']}" for e in exc.errors()[:3]
        )
        why = f"response does not match the schema ({where})"
        shown = raw if raw is not None else orjson.dumps(doc)
        raise protocol_error(step, why, shown, mask.text) from exc


def run_answers(
    step: str, items: list[dict[str, Any]], mask: SecretMask
) -> list[wire.RunAnswer | RemoteProtocolError]:
    """Each of a batch's answers as a ``RunAnswer``, or the protocol error of its task: all
    in one validation when they all match the schema, else each read on its own, so that
    a malformed answer fails its task only."""
    docs = [mask.tree(item) for item in items] if mask.secrets else items
    try:
        return list(_RUN_ANSWERS.validate_python(docs))
    except ValidationError:
        pass
    read: list[wire.RunAnswer | RemoteProtocolError] = []
    for doc in docs:
        try:
            read.append(validated(step, wire.RunAnswer, doc, mask))
        except RemoteProtocolError as exc:
            read.append(exc)
    return read
