"""The ``middleware:`` list of an agent in the YAML file: the built-ins by name, with their
settings (docs/tools.md, "Middleware"). Pure pydantic: what each built-in does lives in
``deepagents/agentkit/builtins/``.

The list's order is the chain's order: the first entry is the outermost. ``check_order``
refuses an order the chain cannot honour, naming the entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepagents.errors import ConfigError

TOOL_GLOB = r"^[A-Za-z0-9_.*?\[\]-]{1,128}$"
FUNCTION_PATH = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OnDeny(StrEnum):
    END = "end"  # the task ends guardrail_denied
    TELL_MODEL = "tell_model"  # the refusal goes back to the model as the tool's error


class GuardRule(_Strict):
    """A tool (a glob over its name) and, optionally, globs its arguments must match."""

    tool: str = Field(pattern=TOOL_GLOB)
    arguments: dict[str, str] = Field(
        default_factory=dict, description="argument name -> glob over its value as text"
    )


class GuardrailConfig(_Strict):
    name: Literal["guardrail"]
    allow: tuple[GuardRule, ...] = Field(
        default=(), description="when given, a call must match one of these"
    )
    deny: tuple[GuardRule, ...] = Field(default=(), description="a call matching one is refused")
    policy: str | None = Field(
        default=None,
        pattern=FUNCTION_PATH,
        description="module:function deciding each call; an exception in it refuses",
    )
    on_deny: OnDeny = OnDeny.END

    @model_validator(mode="after")
    def _something(self) -> GuardrailConfig:
        if not (self.allow or self.deny or self.policy):
            raise ValueError("a guardrail needs allow, deny or policy")
        return self


class LoopDetectionConfig(_Strict):
    name: Literal["loop_detection"]
    repeats: int = Field(default=3, ge=2, description="same tool and arguments this many times…")
    window: int = Field(default=20, ge=2, le=1000, description="…within this many last calls")

    @model_validator(mode="after")
    def _fits(self) -> LoopDetectionConfig:
        if self.repeats > self.window:
            raise ValueError("repeats must be <= window")
        return self


class LimitsConfig(_Strict):
    name: Literal["limits"]
    model_calls: int | None = Field(default=None, ge=1, description="per task")
    tool_calls: int | None = Field(default=None, ge=1, description="per task")
    cost_usd: float | None = Field(
        default=None, gt=0, description="the task's model spend, its children's included"
    )
    tokens: int | None = Field(
        default=None, ge=1, description="the task's model tokens, its children's included"
    )

    @model_validator(mode="after")
    def _something(self) -> LimitsConfig:
        if (self.model_calls, self.tool_calls, self.cost_usd, self.tokens) == (None,) * 4:
            raise ValueError("limits needs model_calls, tool_calls, cost_usd or tokens")
        return self


class BudgetStrategy(StrEnum):
    SUMMARISE = "summarise"
    TRUNCATE = "truncate"


class ContextBudgetConfig(_Strict):
    name: Literal["context_budget"]
    strategy: BudgetStrategy = BudgetStrategy.SUMMARISE
    model: str | None = Field(
        default=None, description="summarise: the model (under models:) that writes summaries"
    )
    threshold: float = Field(
        default=0.75, gt=0, lt=1, description="act when the input passes this share of the window"
    )
    keep_last: int = Field(default=6, ge=1, le=1000, description="recent messages kept as they are")
    window_tokens: int | None = Field(
        default=None, ge=64, description="default: the called model's context_tokens"
    )

    @model_validator(mode="after")
    def _model(self) -> ContextBudgetConfig:
        if self.strategy is BudgetStrategy.SUMMARISE and self.model is None:
            raise ValueError("strategy summarise needs model")
        return self


class ApprovalConfig(_Strict):
    name: Literal["approval"]
    tools: tuple[Annotated[str, Field(pattern=TOOL_GLOB)], ...] = Field(
        default=(),
        description="globs of tools to approve, besides those whose policy says destructive",
    )
    timeout_s: float = Field(default=86_400.0, gt=0, le=30 * 86_400)
    on_timeout: Literal["fail", "reject"] = "fail"


class PiiKind(StrEnum):
    EMAIL = "email"
    PHONE = "phone"
    CARD = "card"
    IBAN = "iban"
    IP = "ip"


class PiiRedactionConfig(_Strict):
    name: Literal["pii_redaction"]
    kinds: tuple[PiiKind, ...] = tuple(PiiKind)


MiddlewareEntry = Annotated[
    GuardrailConfig
    | LoopDetectionConfig
    | LimitsConfig
    | ContextBudgetConfig
    | ApprovalConfig
    | PiiRedactionConfig,
    Field(discriminator="name"),
]


class OrderError(ConfigError):
    """An order of built-ins the chain cannot honour; ``index`` is the entry at fault."""

    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        super().__init__(reason, field=f"middleware[{index}]")


def check_order(names: Sequence[str]) -> None:
    """Raise ``OrderError`` for an order the chain cannot honour.

    - a built-in appears at most once (two guardrails or two limits would each count and
      decide alone, and the stricter would win by accident of order);
    - ``approval`` comes before ``guardrail``: the first is the outermost, so arguments a
      person edits pass the guardrail on their way in; the other way round an edited call
      would reach the tool unchecked;
    - ``context_budget`` comes before ``pii_redaction``: the budget shortens the run's own
      history, which it sees only as the outer of the two (its summaries then pass the
      redaction on their way out); inside, it would shorten a redacted copy every turn.
    """
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        if name in seen:
            raise OrderError(index, f"{name} appears twice (also at middleware[{seen[name]}])")
        seen[name] = index
    guard, approval = seen.get("guardrail"), seen.get("approval")
    if guard is not None and approval is not None and approval > guard:
        raise OrderError(
            approval,
            f"approval must come before guardrail (middleware[{guard}]): arguments a person edits "
            "would reach the tool without passing the guardrail",
        )
    budget, pii = seen.get("context_budget"), seen.get("pii_redaction")
    if budget is not None and pii is not None and budget > pii:
        raise OrderError(
            budget,
            f"context_budget must come before pii_redaction (middleware[{pii}]): it would "
            "shorten a redacted copy instead of the run's history",
        )
