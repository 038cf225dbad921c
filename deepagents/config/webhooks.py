"""The ``webhooks`` section: HTTP endpoints told of a task's question and of its result,
each for some tenants or agents (docs/webhooks.md). The signing secret is read from the
environment variable the entry names, never from the file."""

from __future__ import annotations

import os
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepagents.errors import ConfigError

WEBHOOK_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"  # it becomes part of a Redis key


class WebhookEvent(StrEnum):
    QUESTION = "question"  # a task waits for a person's answer (``ctx.ask``)
    RESULT = "result"  # a task's story ended: succeeded, failed, dropped, expired, dead letter


class WebhookConfig(BaseModel):
    """One endpoint. Empty ``tenants`` / ``agents``: every tenant / every agent."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(
        pattern=r"^https?://[^/?#\s]+(/[^#\s]*)?$", description="where events are POSTed"
    )
    secret_env: str = Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$",
        description="the environment variable holding the signing secret",
    )
    tenants: tuple[str, ...] = Field(default=(), description="only these tenants' tasks")
    agents: tuple[str, ...] = Field(default=(), description="only these agents' tasks")
    events: tuple[WebhookEvent, ...] = Field(
        default=(WebhookEvent.QUESTION, WebhookEvent.RESULT), min_length=1
    )
    timeout_s: float = Field(default=10.0, gt=0, le=300, description="per delivery attempt")
    retry_base_ms: int = Field(default=1_000, ge=10, description="first retry's delay")
    retry_max_ms: int = Field(
        default=60_000, ge=10, le=3_600_000, description="the backoff's cap between attempts"
    )

    @model_validator(mode="after")
    def _backoff(self) -> WebhookConfig:
        if self.retry_max_ms < self.retry_base_ms:
            raise ValueError("retry_max_ms must be at least retry_base_ms")
        return self

    def wants(self, kind: WebhookEvent, tenant: str | None, agent: str | None) -> bool:
        if kind not in self.events:
            return False
        if self.tenants and tenant not in self.tenants:
            return False
        return not self.agents or agent in self.agents

    def secret(self, name: str) -> bytes:
        """The signing secret from the environment; ConfigError names the variable (never
        the value) when it is unset or empty."""
        value = os.environ.get(self.secret_env, "")
        if not value:
            raise ConfigError(
                f"webhooks.{name}: the environment variable {self.secret_env} (its signing "
                "secret) is not set"
            )
        return value.encode()
