"""Read and parse a request body defensively (RELIABILITY.md C and E1).

The size cap holds before anything is buffered: a declared ``Content-Length`` over the
cap is refused at once, and a streaming byte counter stops chunked bodies (and bodies
longer than declared) at the cap. Parsing is strict where Python's ``json`` is lax:
duplicate keys (the last would silently win, a smuggling risk), NaN/Infinity, huge
integers, integers orjson cannot encode (outside 64 bits), deep nesting, and strings Redis
or PostgreSQL cannot store are all refused.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Any, NoReturn

from starlette.requests import ClientDisconnect, Request

from deepagents.config.gateway import BodyLimits
from deepagents.errors import DeepAgentsError, ErrorCode
from deepagents.gateway.http import BODY_RECEIVED_KEY
from deepagents.gateway.problems import FieldError, Problem

JSON_TYPES = ("application/json",)
# What orjson, which encodes every task, can hold: a signed or an unsigned 64-bit integer.
INT_MIN, INT_MAX = -(2**63), 2**64 - 1


# What reading and parsing a JSON body can answer (here and in budget.py), for the routes'
# documented responses.
READ_BODY_CODES = (
    ErrorCode.EMPTY_BODY,
    ErrorCode.INVALID_JSON,
    ErrorCode.DUPLICATE_KEY,
    ErrorCode.NON_FINITE_NUMBER,
    ErrorCode.NUMBER_TOO_LONG,
    ErrorCode.NUMBER_OUT_OF_RANGE,
    ErrorCode.NESTING_TOO_DEEP,
    ErrorCode.TOO_MANY_KEYS,
    ErrorCode.BAD_STRING,
    ErrorCode.BODY_TOO_LARGE,
    ErrorCode.REQUEST_TIMEOUT,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE,
)


class _Reject(DeepAgentsError, ValueError):
    """Raised inside json hooks; carries the problem code."""

    def __init__(self, code: ErrorCode, detail: str) -> None:
        super().__init__(detail)
        self.code = code


async def read_body(request: Request, limits: BodyLimits) -> bytes:
    _check_content_type(request.headers.get("content-type"))
    cap = limits.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        _too_large(cap)
    chunks: list[bytes] = []
    try:
        if request.scope.get(BODY_RECEIVED_KEY):
            # All of it has arrived (``http.py``): reading cannot wait, so no deadline and
            # no timer to arm per request.
            await _take(request, cap, chunks)
        else:
            # A client trickling its body would hold a connection and a task forever.
            async with asyncio.timeout(limits.read_timeout_s):
                await _take(request, cap, chunks)
    except ClientDisconnect as exc:
        raise Problem(ErrorCode.INVALID_JSON, "the client closed the connection mid-body") from exc
    except TimeoutError:
        raise Problem(
            ErrorCode.REQUEST_TIMEOUT,
            f"the body did not arrive within {limits.read_timeout_s:g} s "
            f"({sum(map(len, chunks))} bytes received); send it at once",
            headers={"Connection": "close"},
        ) from None
    return b"".join(chunks)


async def _take(request: Request, cap: int, chunks: list[bytes]) -> None:
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            _too_large(cap)
        chunks.append(chunk)


def _too_large(cap: int) -> NoReturn:
    raise Problem(
        ErrorCode.BODY_TOO_LARGE,
        f"the body is over {cap} bytes; send less per request (split a batch) or store big "
        "inputs elsewhere and pass a reference in the payload",
    )


def _check_content_type(value: str | None) -> None:
    media = (value or "").split(";", 1)[0].strip().lower()
    if media in JSON_TYPES or (media.startswith("application/") and media.endswith("+json")):
        charset = (value or "").lower().partition("charset=")[2].strip().strip('"')
        if charset and charset not in ("utf-8", "utf8"):
            raise Problem(ErrorCode.UNSUPPORTED_MEDIA_TYPE, f"charset {charset!r}: send UTF-8 JSON")
        return
    raise Problem(
        ErrorCode.UNSUPPORTED_MEDIA_TYPE,
        f"Content-Type is {value or 'missing'}; send the body as JSON with "
        "'Content-Type: application/json'",
    )


def parse_json(body: bytes, limits: BodyLimits) -> Any:
    if not body.strip():
        raise Problem(ErrorCode.EMPTY_BODY, "the body is empty; send a JSON object")
    try:
        text = body.decode("utf-8")  # a BOM or UTF-16 fails here or in the parser below
    except UnicodeDecodeError as exc:
        raise Problem(ErrorCode.INVALID_JSON, f"the body is not UTF-8 ({exc.reason})") from exc
    out_of_range: list[int] = []
    try:
        value = json.loads(
            text,
            object_pairs_hook=_object_hook(limits),
            parse_constant=_no_constants,
            parse_int=_int_parser(limits, out_of_range),
            parse_float=_float_parser(limits),
        )
    except _Reject as exc:
        raise Problem(exc.code, str(exc)) from None
    except RecursionError:
        raise Problem(ErrorCode.NESTING_TOO_DEEP, _depth_detail(limits)) from None
    except json.JSONDecodeError as exc:
        raise Problem(
            ErrorCode.INVALID_JSON,
            f"not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
        ) from None
    if out_of_range:
        _out_of_range(value)
    _check_tree(value, limits)
    return value


def _out_of_range(root: Any) -> NoReturn:
    """The 400 for an integer outside 64 bits, naming where it is (only found once one is:
    the parser's hook cannot know the path, and tracking it for every value costs)."""
    field = _path_of(root, _too_wide) or "body"
    message = f"the integer is outside [{INT_MIN}, {INT_MAX}]; send big numbers as strings"
    raise Problem(
        ErrorCode.NUMBER_OUT_OF_RANGE,
        f"{field}: {message}",
        errors=[FieldError(field=field, message=message)],
    )


def _too_wide(value: Any) -> bool:
    return type(value) is int and not INT_MIN <= value <= INT_MAX


def _path_of(root: Any, wanted: Any) -> str | None:
    """The dotted path of the first value ``wanted`` accepts, breadth first."""
    queue: deque[tuple[Any, tuple[str, ...]]] = deque([(root, ())])
    while queue:
        value, path = queue.popleft()
        if wanted(value):
            return ".".join(path)
        if isinstance(value, dict):
            queue.extend((item, (*path, str(key))) for key, item in value.items())
        elif isinstance(value, list):
            queue.extend((item, (*path, str(i))) for i, item in enumerate(value))
    return None


def _depth_detail(limits: BodyLimits) -> str:
    return f"objects and arrays may nest at most {limits.max_depth} deep; flatten the payload"


def _object_hook(limits: BodyLimits) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if len(pairs) > limits.max_keys:
            raise _Reject(
                ErrorCode.TOO_MANY_KEYS,
                f"an object has {len(pairs)} keys; at most {limits.max_keys}",
            )
        out = dict(pairs)
        if len(out) != len(pairs):
            raise _Reject(
                ErrorCode.DUPLICATE_KEY,
                f"key {_first_duplicate(pairs)[:64]!r} appears twice in one object; send it once",
            )
        return out

    return hook


def _first_duplicate(pairs: list[tuple[str, Any]]) -> str:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)
    return ""


def _no_constants(name: str) -> NoReturn:
    raise _Reject(
        ErrorCode.NON_FINITE_NUMBER, f"{name} is not valid JSON; send a finite number or null"
    )


def _int_parser(limits: BodyLimits, out_of_range: list[int]) -> Any:
    def parse(text: str) -> int:
        if len(text.lstrip("-")) > limits.max_number_digits:
            raise _Reject(
                ErrorCode.NUMBER_TOO_LONG,
                f"an integer has {len(text)} digits; at most {limits.max_number_digits} "
                "(send big numbers as strings)",
            )
        value = int(text)
        if not INT_MIN <= value <= INT_MAX:
            out_of_range.append(value)
        return value

    return parse


def _float_parser(limits: BodyLimits) -> Any:
    def parse(text: str) -> float:
        if len(text) > limits.max_number_digits + 8:
            raise _Reject(ErrorCode.NUMBER_TOO_LONG, f"a number is {len(text)} characters long")
        value = float(text)
        if value in (float("inf"), float("-inf")):
            raise _Reject(
                ErrorCode.NON_FINITE_NUMBER, f"{text} overflows a double; send a smaller number"
            )
        return value

    return parse


def _check_tree(root: Any, limits: BodyLimits) -> None:
    """Depth and string checks, iteratively (no recursion on hostile input)."""
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            _check_depth(depth, limits)
            for key, item in value.items():
                _check_string(key, limits)
                stack.append((item, depth + 1))
        elif isinstance(value, list):
            _check_depth(depth, limits)
            stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, str):
            _check_string(value, limits)


def _check_depth(depth: int, limits: BodyLimits) -> None:
    if depth > limits.max_depth:
        raise Problem(ErrorCode.NESTING_TOO_DEEP, _depth_detail(limits))


def _check_string(value: str, limits: BodyLimits) -> None:
    if len(value) > limits.max_string_chars:
        raise Problem(
            ErrorCode.BAD_STRING,
            f"a string is {len(value)} characters; at most {limits.max_string_chars}",
        )
    if "\x00" in value:
        raise Problem(
            ErrorCode.BAD_STRING, "a string holds \\u0000, which storage rejects; remove it"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Problem(
            ErrorCode.BAD_STRING,
            "a string holds a lone surrogate (e.g. \\ud800); send valid Unicode",
        ) from None
