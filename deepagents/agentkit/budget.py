"""Context budget: when a model call's input passes ``threshold`` of the model's context
window, the older turns are summarised (through the rest of the chain, by the configured
model) or left out, and the run goes on with the shorter history.

The recent ``keep_last`` messages stay as they are, and never start with a tool result
whose request was cut off (providers refuse a tool message without its assistant call).
The shorter history replaces the run's, so the next turn starts from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from deepagents.agentkit.middleware import (
    AgentMiddleware,
    ModelHandler,
    ModelRequest,
    ModelResponse,
)
from deepagents.config.middleware import BudgetStrategy, ContextBudgetConfig
from deepagents.errors import ConfigError
from deepagents.modelcall.pricing import estimate_input_tokens
from deepagents.modelcall.usage import current_model_calls

SUMMARY_PROMPT = (
    "Summarise the conversation below for an agent that will continue it: keep every fact, "
    "decision, open question and tool result it may still need. Answer with the summary only."
)
Messages = list[dict[str, Any]]


class ContextBudget(AgentMiddleware):
    name = "context_budget"

    def __init__(
        self,
        *,
        strategy: BudgetStrategy = BudgetStrategy.TRUNCATE,
        model: str | None = None,
        threshold: float = 0.75,
        keep_last: int = 6,
        window_tokens: int | None = None,
    ) -> None:
        ContextBudgetConfig(  # the same bounds as the YAML's
            name="context_budget", strategy=strategy, model=model, threshold=threshold,
            keep_last=keep_last, window_tokens=window_tokens,
        )  # fmt: skip
        self.strategy, self.model, self.threshold = strategy, model, threshold
        self.keep_last, self.window_tokens = keep_last, window_tokens

    @classmethod
    def from_config(cls, config: ContextBudgetConfig) -> ContextBudget:
        return cls(
            strategy=config.strategy, model=config.model, threshold=config.threshold,
            keep_last=config.keep_last, window_tokens=config.window_tokens,
        )  # fmt: skip

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        window, chars_per_token = self._window(request.model)
        limit = int(window * self.threshold)
        if estimate_input_tokens(request.messages, chars_per_token) <= limit:  # type: ignore[arg-type]
            return await handler(request)
        messages = [dict(m) for m in request.messages]
        head, old, recent = _split(messages, self.keep_last)
        if self.strategy is BudgetStrategy.SUMMARISE and old:
            note = await self._summary(request, handler, old)
        else:
            note = f"[{len(old)} earlier messages were left out to fit the context window]"
        shorter = [*head, {"role": "system", "content": note}, *recent]
        while estimate_input_tokens(shorter, chars_per_token) > limit and len(recent) > 1:
            recent = _trim_front(recent)  # still too long: give up the oldest kept turns
            shorter = [*head, {"role": "system", "content": note}, *recent]
        if request.messages is request.state.messages:
            request.state.messages[:] = shorter  # the next turn starts from the shorter history
        return await handler(request.override(messages=shorter))

    def _window(self, model: str) -> tuple[int, float]:
        calls = current_model_calls()
        config = calls.models.get(model) if calls is not None else None
        chars_per_token = config.chars_per_token if config is not None else 4.0
        if self.window_tokens is not None:
            return self.window_tokens, chars_per_token
        if config is None:
            raise ConfigError(
                f"context_budget: give window_tokens, or call a model under models: "
                f"({model!r} is not one here)"
            )
        return config.context_tokens, chars_per_token

    async def _summary(self, request: ModelRequest, handler: ModelHandler, old: Messages) -> str:
        prompt = [
            {"role": "system", "content": SUMMARY_PROMPT},
            {"role": "user", "content": _transcript(old)},
        ]
        summary = await handler(request.override(model=self.model, messages=prompt, tools=()))
        return f"Summary of the earlier conversation: {summary.text}"


def _split(messages: Messages, keep_last: int) -> tuple[Messages, Messages, Messages]:
    """The leading system messages, the older turns, the recent ones (whole tool groups)."""
    start = 0
    while start < len(messages) and messages[start].get("role") == "system":
        start += 1
    cut = max(start, len(messages) - keep_last)
    while cut > start and messages[cut].get("role") == "tool":
        cut -= 1  # keep a tool result with the assistant message that asked for it
    return messages[:start], messages[start:cut], messages[cut:]


def _trim_front(recent: Messages) -> Messages:
    rest = recent[1:]
    while len(rest) > 1 and rest[0].get("role") == "tool":
        rest = rest[1:]
    return rest


def _transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
        calls = message.get("tool_calls")
        if calls:
            text += " [asks for tools: " + orjson.dumps(calls).decode() + "]"
        lines.append(f"{message.get('role')}: {text}")
    return "\n".join(lines)
