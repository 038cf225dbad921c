"""The guardrail: allow and deny rules over tools and their arguments, or a policy function.

It fails closed: a policy that raises, or answers anything but ``True``, refuses the call.
A refused call ends the task ``guardrail_denied`` (``on_deny: end``) or goes back to the
model as the tool's error (``on_deny: tell_model``), by configuration.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from fnmatch import fnmatchcase
from typing import Any

import orjson

from deepagents.agentkit.middleware import AgentMiddleware, ToolHandler, ToolRequest
from deepagents.config.middleware import GuardrailConfig, GuardRule, OnDeny
from deepagents.contract.toolcalls import ToolCall, ToolResult
from deepagents.errors import ConfigError, GuardrailDenied

log = logging.getLogger("deepagents.agentkit")

# True allows the call; False or a reason (str) refuses it.
Policy = Callable[[ToolCall], bool | str | Awaitable[bool | str]]


class Guardrail(AgentMiddleware):
    name = "guardrail"

    def __init__(
        self,
        *,
        allow: Sequence[GuardRule] = (),
        deny: Sequence[GuardRule] = (),
        policy: Policy | None = None,
        on_deny: OnDeny = OnDeny.END,
    ) -> None:
        self.allow, self.deny, self.policy, self.on_deny = (
            tuple(allow),
            tuple(deny),
            policy,
            on_deny,
        )

    @classmethod
    def from_config(cls, config: GuardrailConfig) -> Guardrail:
        policy = load_function(config.policy) if config.policy else None
        return cls(allow=config.allow, deny=config.deny, policy=policy, on_deny=config.on_deny)

    async def wrap_tool_call(self, request: ToolRequest, handler: ToolHandler) -> ToolResult:
        call = request.call
        try:
            reason = await self.refusal(call)
        except Exception as exc:  # a guard that cannot decide refuses (fails closed)
            reason = f"the guardrail failed ({type(exc).__name__}), so it refuses"
        if reason is None:
            return await handler(request)
        log.warning(
            "tool call refused",
            extra={"action": "guardrail_denied", "tool": call.name, "agent": request.state.agent},
        )
        if self.on_deny is OnDeny.END:
            raise GuardrailDenied(f"tool {call.name!r}: {reason}")
        content = {"error": "guardrail_denied", "message": reason}
        return ToolResult(call.id, call.name, content, is_error=True)

    async def refusal(self, call: ToolCall) -> str | None:
        """Why ``call`` is refused, or None when it may run."""
        for rule in self.deny:
            if _matches(rule, call):
                return f"denied by the rule for {rule.tool!r}"
        if self.allow and not any(_matches(rule, call) for rule in self.allow):
            return "no allow rule matches"
        if self.policy is None:
            return None
        verdict = self.policy(call)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if verdict is True:
            return None
        return verdict if isinstance(verdict, str) and verdict else "refused by the policy"


def _matches(rule: GuardRule, call: ToolCall) -> bool:
    if not fnmatchcase(call.name, rule.tool):
        return False
    for name, glob in rule.arguments.items():
        if name not in call.arguments or not fnmatchcase(_text(call.arguments[name]), glob):
            return False
    return True


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def load_function(path: str) -> Callable[..., Any]:
    """``module.path:function`` from the configuration."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{path!r}: cannot import {module_name!r} ({exc})") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"{path!r}: no function {attr!r} in {module_name}")
    return fn  # type: ignore[no-any-return]
