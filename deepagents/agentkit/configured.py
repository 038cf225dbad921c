"""An agent's chain as configured: the built-ins of its ``middleware:`` list in the YAML
(outermost first), then the middleware its class declares in code (``middleware = [...]``).

The worker builds it once per process and makes it current for every task it runs
(``use_agent_chain``); ``run_tools`` picks it up from there.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deepagents.config.middleware import (
    ApprovalConfig,
    ContextBudgetConfig,
    GuardrailConfig,
    LimitsConfig,
    LoopDetectionConfig,
    MiddlewareEntry,
    PiiRedactionConfig,
)
from deepagents.config.schema import FileConfig
from deepagents.errors import ConfigError

if TYPE_CHECKING:
    from deepagents.agentkit.chain import Chain
    from deepagents.agentkit.middleware import AgentMiddleware


@dataclass(frozen=True, slots=True)
class AgentChain:
    """The chain every run of one agent goes through (None: the agent has no middleware),
    and the agent's name."""

    agent: str
    chain: Chain | None


_current: ContextVar[AgentChain | None] = ContextVar("deepagents_agent_chain", default=None)


def build_middleware(entry: MiddlewareEntry) -> AgentMiddleware:
    """The built-in a YAML entry names, with its settings. Each built-in's module is loaded
    when a YAML entry names it: a worker whose agent has none starts without them."""
    match entry:
        case GuardrailConfig():
            from deepagents.agentkit.guardrail import Guardrail

            return Guardrail.from_config(entry)
        case LoopDetectionConfig():
            from deepagents.agentkit.loop_detection import LoopDetection

            return LoopDetection.from_config(entry)
        case LimitsConfig():
            from deepagents.agentkit.limits import Limits

            return Limits.from_config(entry)
        case ContextBudgetConfig():
            from deepagents.agentkit.budget import ContextBudget

            return ContextBudget.from_config(entry)
        case ApprovalConfig():
            from deepagents.agentkit.approval import Approval

            return Approval.from_config(entry)
        case PiiRedactionConfig():
            from deepagents.agentkit.pii import PiiRedaction

            return PiiRedaction.from_config(entry)


def agent_chain(agent: object, name: str, config: FileConfig | None) -> AgentChain:
    """``agent``'s chain: its YAML entries, then its class's ``middleware``."""
    entry = config.agents.get(name) if config is not None else None
    code: Sequence[AgentMiddleware] = getattr(agent, "middleware", ())
    if not code and (entry is None or not entry.middleware):
        # Nothing to chain: the chain's modules (and the tools' they load) stay unloaded,
        # which keeps them off the start of a worker whose agent has no middleware.
        return AgentChain(name, None)
    from deepagents.agentkit.chain import Chain

    built = [build_middleware(e) for e in entry.middleware] if entry is not None else []
    try:
        chain = Chain([*built, *code])
    except ConfigError as exc:
        raise ConfigError(exc.reason, field=f"agents.{name}.{exc.field}") from exc
    return AgentChain(name, chain)


@contextmanager
def use_agent_chain(chain: AgentChain) -> Iterator[AgentChain]:
    """Make ``chain`` current for this context (tasks created inside inherit it)."""
    token = _current.set(chain)
    try:
        yield chain
    finally:
        _current.reset(token)


def current_agent_chain() -> AgentChain | None:
    return _current.get()
