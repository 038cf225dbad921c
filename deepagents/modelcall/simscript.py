"""What the simulated model answers: a final text, or tool calls scripted by directives.

A test or the demo scripts the simulated model with lines of the form ``sim: ...`` in the
last user message (read first) or in the system prompt::

    sim: call get_weather {"city": "Paris"}     one tool call (arguments: the rest of the
    sim: call get_time                          line, sent verbatim; none means {})
    sim: then                                   the calls above are one turn; next turn:
    sim: call summarise {"n": 2}
    sim: repeat                                 after the last turn, ask for it again forever
    sim: say The weather is fine.               the final answer's text

Turn ``k`` (the number of assistant messages with tool calls since the last user message)
gets the calls of the ``k``-th group; after the last group the model answers finally. The
final answer is the ``say`` text, else, when tool results were just fed back,
``tool results: NAME=CONTENT; ...`` (so a test sees what came back), else filler words.
Calls are made as directed, offered or not, and arguments are sent as written, so the
client's checks can be tested with a bad call. Deterministic: the same history gives the
same answer; call ids are ``call_<turn>_<index>``.

Requests in the Anthropic format are first read into this (OpenAI) shape by
``simanthropic``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

DIRECTIVE = "sim:"


@dataclass(frozen=True, slots=True)
class SimCall:
    id: str
    name: str
    arguments: str  # JSON text as the directive wrote it (may be invalid on purpose)


@dataclass(frozen=True, slots=True)
class SimAnswer:
    text: str
    calls: tuple[SimCall, ...] = ()
    filler: bool = False  # no script and no tool results: the settings decide the length

    @property
    def finish(self) -> str:
        return "tool_calls" if self.calls else "stop"

    def tokens(self) -> int:
        """Completion tokens of a scripted answer (4 characters a token, like the prompt)."""
        size = len(self.text) + sum(len(c.name) + len(c.arguments) for c in self.calls)
        return max(1, math.ceil(size / 4))


@dataclass
class _Script:
    turns: list[list[tuple[str, str]]] = field(default_factory=lambda: [[]])
    repeat: bool = False
    say: str | None = None

    @property
    def empty(self) -> bool:
        return not any(self.turns) and self.say is None


def answer(messages: Sequence[Any]) -> SimAnswer:
    """The simulated model's answer to a chat history in the OpenAI format."""
    history = [m for m in messages if isinstance(m, dict)]
    script = _script(history)
    turn = _turns_taken(history)
    groups = [g for g in script.turns if g]
    if turn < len(groups) or (script.repeat and groups):
        group = groups[min(turn, len(groups) - 1)]
        calls = tuple(
            SimCall(f"call_{turn}_{i}", name, arguments)
            for i, (name, arguments) in enumerate(group)
        )
        return SimAnswer("", calls)
    if script.say is not None:
        return SimAnswer(script.say)
    results = _fed_back(history)
    if results:
        return SimAnswer("tool results: " + "; ".join(results))
    return SimAnswer("", filler=True)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: the text ones
        parts = [p for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "\n".join(str(p.get("text", "")) for p in parts)
    return ""


def _last_user(history: list[dict[str, Any]]) -> int:
    for i in range(len(history) - 1, -1, -1):
        if history[i].get("role") == "user":
            return i
    return -1


def _script(history: list[dict[str, Any]]) -> _Script:
    last = _last_user(history)
    if last >= 0:
        script = _parse(_text(history[last]))
        if not script.empty:
            return script
    system = "\n".join(_text(m) for m in history if m.get("role") in ("system", "developer"))
    return _parse(system)


def _parse(text: str) -> _Script:
    script = _Script()
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith(DIRECTIVE):
            continue
        verb, _, rest = line[len(DIRECTIVE) :].strip().partition(" ")
        rest = rest.strip()
        if verb == "call" and rest:
            name, _, arguments = rest.partition(" ")
            script.turns[-1].append((name, arguments.strip() or "{}"))
        elif verb == "then":
            script.turns.append([])
        elif verb == "repeat":
            script.repeat = True
        elif verb == "say":
            script.say = rest
    return script


def _turns_taken(history: list[dict[str, Any]]) -> int:
    after = history[_last_user(history) + 1 :]
    return sum(1 for m in after if m.get("role") == "assistant" and m.get("tool_calls"))


def _fed_back(history: list[dict[str, Any]]) -> list[str]:
    """``NAME=CONTENT`` for the tool results at the end of the history."""
    names: dict[str, str] = {}
    for message in history:
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict):
                function = call.get("function") or {}
                names[str(call.get("id"))] = str(function.get("name", "?"))
    results: list[str] = []
    for message in reversed(history):
        if message.get("role") != "tool":
            break
        content = message.get("content")
        shown = content if isinstance(content, str) else orjson.dumps(content).decode()
        results.append(f"{names.get(str(message.get('tool_call_id')), '?')}={shown}")
    return results[::-1]
