"""The ``models:`` section of the YAML file. Pure pydantic: ``config/schema.py`` imports it.

Durations carry their unit in the name (``_s``); prices are USD per 1,000 tokens.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, HttpUrl, model_validator

MODEL_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimeoutConfig(_Strict):
    total_s: float = Field(default=30.0, gt=0, description="whole call, retries included")
    connect_s: float = Field(default=5.0, gt=0)
    first_token_s: float = Field(default=10.0, gt=0, description="request sent -> first token")
    per_token_s: float = Field(default=0.5, gt=0, description="stream gap allowed between tokens")
    min_attempt_s: float = Field(
        default=0.0, ge=0, description="an attempt needs at least this long; none starts with less"
    )
    attempt_s: float | None = Field(
        default=None, gt=0, description="plain calls: one attempt's bound (default total_s / 2)"
    )

    def plain_attempt_s(self) -> float:
        """A hung plain attempt ends in time for a retry within ``total_s``."""
        return self.attempt_s if self.attempt_s is not None else self.total_s / 2


class RetryConfig(_Strict):
    max_retries: int = Field(default=3, ge=0, le=10)
    base_s: float = Field(default=0.1, gt=0, description="first backoff; doubles per retry")
    max_backoff_s: float = Field(default=5.0, gt=0)
    max_retry_after_s: float = Field(
        default=30.0, ge=0, description="a longer Retry-After is not waited for: the call gives up"
    )
    response_too_large: bool = Field(
        default=False, description="retry an answer over its size cap instead of moving on"
    )

    @model_validator(mode="after")
    def _bounds(self) -> RetryConfig:
        if self.max_backoff_s < self.base_s:
            raise ValueError("max_backoff_s must be >= base_s")
        return self


class BreakerConfig(_Strict):
    window_s: float = Field(default=30.0, gt=0, description="sliding window of recent attempts")
    min_calls: int = Field(default=5, ge=1, description="no verdict on fewer attempts")
    failure_rate: float = Field(default=0.5, gt=0, le=1)
    cooldown_s: float = Field(default=10.0, gt=0, description="open -> half-open after this")
    down_after: int = Field(
        default=5,
        ge=0,
        description="this many distinct tasks in a row finding the service down (refused or "
        "reset connections, 502/503/504), with no success between, open it at once (0: off)",
    )
    state_cache_s: float = Field(
        default=0.2, ge=0, description="a worker trusts a 'closed' it read this long (0: never)"
    )


class LimitsConfig(_Strict):
    """Fleet-wide limits kept in Redis; ``None`` means unlimited."""

    rpm: int | None = Field(default=None, ge=1, description="requests per window, whole fleet")
    tpm: int | None = Field(default=None, ge=1, description="tokens per window, whole fleet")
    key_rpm: int | None = Field(default=None, ge=1, description="requests per window per API key")
    key_tpm: int | None = Field(default=None, ge=1, description="tokens per window per API key")
    window_s: float = Field(default=60.0, gt=0, description="the provider's rate window")
    daily_budget_usd: float | None = Field(default=None, ge=0)
    daily_requests: int | None = Field(default=None, ge=0)
    tenant_daily_budget_usd: float | None = Field(default=None, ge=0)
    tenant_daily_requests: int | None = Field(default=None, ge=0)
    agent_daily_budget_usd: float | None = Field(default=None, ge=0)
    agent_daily_requests: int | None = Field(default=None, ge=0)
    concurrency: int = Field(default=32, ge=1, le=10_000, description="in flight per process")
    fleet_concurrency: int | None = Field(default=None, ge=1, description="in flight, all workers")


class VaultConfig(_Strict):
    """Where the API key lives in Vault (KV v2). The Vault token comes from ``token_env``."""

    url: HttpUrl
    mount: str = Field(default="secret", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    path: str = Field(pattern=r"^[A-Za-z0-9_./-]{1,256}$")
    field: str = Field(default="api_key", min_length=1, max_length=64)
    token_env: str = Field(default="VAULT_TOKEN", pattern=r"^[A-Z_][A-Z0-9_]{0,63}$")
    timeout_s: float = Field(default=5.0, gt=0)


class FallbackConfig(_Strict):
    """The declared answer when no model in the chain answers; the Result is ``degraded``."""

    text: str = Field(max_length=10_000)


class ProviderKind(StrEnum):
    """The API a model speaks."""

    OPENAI = "openai"  # chat completions: OpenAI and every compatible server
    ANTHROPIC = "anthropic"  # the Anthropic Messages API (base_url: https://api.anthropic.com/v1)


class ModelKind(StrEnum):
    """What a model is called for."""

    CHAT = "chat"  # wrap_model_call
    EMBEDDING = "embedding"  # embed(): OpenAI-format POST {base_url}/embeddings


class BatchingConfig(_Strict):
    """How concurrent ``embed`` calls in one worker coalesce into one request."""

    batch_size: int = Field(default=64, ge=1, le=2048, description="inputs per request, at most")
    max_wait_ms: float = Field(
        default=5.0, ge=0, le=10_000, description="a batch waits this long for more callers"
    )


class ModelConfig(_Strict):
    base_url: HttpUrl = Field(description="API root, e.g. https://api.openai.com/v1")
    model: str | None = Field(default=None, description="provider's model id; default: the key")
    provider: ProviderKind = ProviderKind.OPENAI
    kind: ModelKind = ModelKind.CHAT
    batching: BatchingConfig = Field(default_factory=BatchingConfig, description="embeddings")
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Z_][A-Z0-9_]{0,63}$")
    vault: VaultConfig | None = None
    context_tokens: int = Field(default=8192, ge=16)
    chars_per_token: float = Field(default=4.0, gt=0, description="input-size estimate")
    max_tokens: int = Field(default=2048, ge=1, description="cap on max_tokens of every call")
    price_in_per_1k: float = Field(default=0.0, ge=0)
    price_out_per_1k: float = Field(default=0.0, ge=0)
    stream: bool = True
    max_response_bytes: int = Field(
        default=4 * 1024 * 1024, ge=1024, description="a larger answer is response_too_large"
    )
    max_sse_line_bytes: int = Field(
        default=256 * 1024, ge=1024, description="a longer stream line is response_too_large"
    )
    max_tool_call_bytes: int = Field(
        default=65_536, ge=64, description="one tool call's arguments; larger is bad_tool_call"
    )
    timeouts: TimeoutConfig = Field(default_factory=TimeoutConfig)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    fallbacks: tuple[str, ...] = Field(default=(), description="models tried next, in order")
    fallback: FallbackConfig | None = None

    def model_id(self, name: str) -> str:
        return self.model or name

    @model_validator(mode="after")
    def _embeddings_speak_openai(self) -> ModelConfig:
        if self.kind is ModelKind.EMBEDDING:
            if self.provider is not ProviderKind.OPENAI:
                raise ValueError("kind: embedding needs provider: openai (an OpenAI-format API)")
            if self.fallbacks or self.fallback:
                # Vectors of another model are not comparable with this one's.
                raise ValueError("kind: embedding takes no fallbacks and no fallback")
        return self


def check_models(models: dict[str, ModelConfig]) -> dict[str, ModelConfig]:
    """Names become Redis keys; fallback chains must name configured models, without loops."""
    for name, model in models.items():
        if not MODEL_NAME_RE.match(name):
            raise ValueError(f"model name {name!r} must match {MODEL_NAME_RE.pattern}")
        for other in model.fallbacks:
            if other not in models:
                raise ValueError(f"models.{name}.fallbacks: unknown model {other!r}")
            if other == name:
                raise ValueError(f"models.{name}.fallbacks: a model cannot fall back to itself")
            if models[other].kind is not model.kind:
                raise ValueError(
                    f"models.{name}.fallbacks: {other!r} is of kind {models[other].kind}, "
                    f"not {model.kind}"
                )
    return models


# The type of ``FileConfig.models``: validated as a whole (names, chains).
ModelsSection = Annotated[dict[str, ModelConfig], AfterValidator(check_models)]
