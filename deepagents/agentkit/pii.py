"""PII redaction: e-mail addresses, phone numbers, card numbers (Luhn-checked), IBANs and IP
addresses in the prompt are replaced by ``[kind]`` before the request leaves the process.

Every model call made below it in the chain is redacted, summaries included. The patterns
are bounded (no nested repetition), so a hostile message cannot make them run long.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from deepagents.agentkit.middleware import (
    AgentMiddleware,
    ModelHandler,
    ModelRequest,
    ModelResponse,
)
from deepagents.config.middleware import PiiKind, PiiRedactionConfig

# Card before phone: a card number also looks like a long phone number.
_ORDER = (PiiKind.EMAIL, PiiKind.IBAN, PiiKind.CARD, PiiKind.IP, PiiKind.PHONE)
_DIGIT = re.compile(r"\d")
_PATTERNS = {
    PiiKind.EMAIL: re.compile(
        # Starts only where a run of address characters starts: linear in the text.
        r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){1,8}"
    ),
    PiiKind.IBAN: re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b"),
    PiiKind.CARD: re.compile(r"\b\d(?:[ -]?\d){12,18}\b"),
    PiiKind.IP: re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b"),
    # Digits in groups (a bare run of digits is an order number as often as a phone).
    PiiKind.PHONE: re.compile(
        r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]\d{2,4}){1,4}\b"
    ),
}


class PiiRedaction(AgentMiddleware):
    name = "pii_redaction"

    def __init__(self, *, kinds: Iterable[PiiKind] = tuple(PiiKind)) -> None:
        wanted = set(kinds)
        self.kinds = tuple(kind for kind in _ORDER if kind in wanted)

    @classmethod
    def from_config(cls, config: PiiRedactionConfig) -> PiiRedaction:
        return cls(kinds=config.kinds)

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        # The history comes back every turn: each text is redacted once per run.
        seen: dict[str, str] = request.state.memo(self)
        messages = [self.message(m, seen) for m in request.messages]
        return await handler(request.override(messages=messages))

    def message(self, message: Mapping[str, Any], seen: dict[str, str]) -> dict[str, Any]:
        out = dict(message)
        content = message.get("content")
        if isinstance(content, str):
            out["content"] = self._text(content, seen)
        elif isinstance(content, list):  # content parts: redact the text ones
            out["content"] = [
                {**p, "text": self._text(p["text"], seen)}
                if isinstance(p, dict) and isinstance(p.get("text"), str)
                else p
                for p in content
            ]
        calls = message.get("tool_calls")
        if isinstance(calls, list):  # the arguments the model wrote go back to it too
            out["tool_calls"] = [self._call(c, seen) for c in calls]
        return out

    def _call(self, call: Any, seen: dict[str, str]) -> Any:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
            return call
        arguments: str = function["arguments"]
        return {**call, "function": {**function, "arguments": self._text(arguments, seen)}}

    def _text(self, text: str, seen: dict[str, str]) -> str:
        redacted = seen.get(text)
        if redacted is None:
            redacted = seen[text] = self.redact(text)
        return redacted

    def redact(self, text: str) -> str:
        # Cheap gates first: most texts have no '@', and the other kinds all need a digit.
        has_digit = _DIGIT.search(text) is not None
        for kind in self.kinds:
            if (kind is PiiKind.EMAIL and "@" not in text) or (
                kind is not PiiKind.EMAIL and not has_digit
            ):
                continue
            text = _PATTERNS[kind].sub(_replacer(kind), text)
        return text


def _replacer(kind: PiiKind) -> Any:
    def replace(match: re.Match[str]) -> str:
        if kind is PiiKind.CARD and not _luhn(match.group()):
            return match.group()  # a long number, not a card
        return f"[{kind.value}]"

    return replace


def _luhn(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()]
    total = 0
    for i, digit in enumerate(reversed(digits)):
        if i % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0
