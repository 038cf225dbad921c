"""The ``gateway:`` section of the YAML config: API keys (hashed), limits, health probe.

Only pydantic here: ``deepagents.config.schema`` imports this module.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ApiKey(_Strict):
    """One bearer key: only its SHA-256 is stored (keys are random, so no slow hash is needed)."""

    tenant: str = Field(pattern=TENANT_PATTERN)
    sha256: str = Field(description="hex SHA-256 of the key; `deepagents gateway --new-key T`")
    name: str = Field(default="", max_length=64, description="a label for logs, never the key")

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        value = value.lower()
        if not _SHA256.match(value):
            raise ValueError("must be 64 lowercase hex digits (the SHA-256 of the key)")
        return value


class TenantLimits(_Strict):
    """Per-tenant admission: a token bucket (tasks/s, fleet-wide) and an in-flight cap."""

    rate_per_s: float = Field(default=2_000.0, gt=0, le=1_000_000)
    burst: int = Field(default=4_000, ge=1, le=10_000_000)
    max_in_flight: int = Field(default=2_000, ge=1, le=1_000_000)


class BodyLimits(_Strict):
    """Caps on a request body, checked before and while parsing (RELIABILITY.md F)."""

    max_body_bytes: int = Field(default=1_048_576, ge=1_024, le=64 * 1_048_576)
    max_depth: int = Field(default=32, ge=2, le=256)
    max_keys: int = Field(default=1_000, ge=1, description="keys in one JSON object")
    max_string_chars: int = Field(default=65_536, ge=16)
    max_number_digits: int = Field(default=20, ge=1, le=4_000)
    read_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="the whole body must arrive within this (a slow-body client gets 408)",
    )
    parse_cpu_per_s: float = Field(
        default=0.25,
        gt=0,
        le=1,
        description="per tenant and gateway process: seconds per second spent parsing its "
        "bodies; a tenant in debt gets 429 before its body is parsed",
    )
    parse_cpu_burst_s: float = Field(default=1.0, gt=0, le=60)
    inline_parse_bytes: int = Field(
        default=65_536,
        ge=0,
        description="bodies larger than this are parsed off the event loop, in one thread",
    )


class A2AEdge(_Strict):
    """A2A (the Agent2Agent protocol, JSON-RPC binding) at the gateway's edge: an agent card
    and the A2A methods per agent type (docs/gateway.md, "A2A"; the ``a2a`` extra)."""

    enabled: bool = Field(
        default=False, description="serve /a2a/{agent} and the agent cards (needs a restart)"
    )
    default_agent: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="the agent type whose card /.well-known/agent-card.json serves",
    )
    public_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$",
        description="the gateway's URL as A2A clients reach it, named in the cards; unset: "
        "the URL each card request came to",
    )


class GatewayConfig(_Strict):
    api_keys: tuple[ApiKey, ...] = ()
    metrics_keys: tuple[str, ...] = Field(
        default=(),
        description="hex SHA-256 of keys that may read /metrics, which names tenants in its "
        "labels; empty: /metrics is open (bind the gateway where only scrapers reach it)",
    )
    defaults: TenantLimits = Field(default_factory=TenantLimits)
    tenants: dict[str, TenantLimits] = Field(default_factory=dict)
    body: BodyLimits = Field(default_factory=BodyLimits)
    max_batch: int = Field(default=100, ge=1, le=10_000)
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="the request line and headers must arrive within this (a slower "
        "client gets 408 and is disconnected); a reload applies to connections opened after it",
    )
    max_header_field_bytes: int = Field(
        default=16_384,
        ge=1_024,
        le=1_048_576,
        description="one header's name and value; a larger one gets 431 and a closed connection",
    )
    max_header_bytes: int = Field(
        default=65_536,
        ge=4_096,
        le=16 * 1_048_576,
        description="the request line and all headers together; more gets 431",
    )
    long_poll_max_s: float = Field(default=30.0, gt=0, le=300)
    probe_timeout_s: float = Field(default=5.0, gt=0, le=60)
    probe_cache_s: float = Field(
        default=5.0,
        ge=0,
        le=300,
        description="/health?full=true answers its last report for this long (it is "
        "unauthenticated, and each probe writes a task): one probe per window per process",
    )
    request_lease_s: float = Field(
        default=120.0,
        gt=0,
        description="an in-flight slot is freed after this even if a gateway died holding it",
    )
    a2a: A2AEdge = Field(default_factory=A2AEdge)

    @field_validator("metrics_keys")
    @classmethod
    def _metrics_hex(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        value = tuple(v.lower() for v in value)
        if not all(_SHA256.match(v) for v in value):
            raise ValueError("each must be 64 lowercase hex digits (the SHA-256 of the key)")
        return value

    @model_validator(mode="after")
    def _unique_keys(self) -> GatewayConfig:
        hashes = [k.sha256 for k in self.api_keys]
        if len(hashes) != len(set(hashes)):
            raise ValueError("api_keys: the same key hash is listed twice")
        if self.request_lease_s <= self.long_poll_max_s:
            raise ValueError("request_lease_s must exceed long_poll_max_s")
        return self

    def limits_for(self, tenant: str) -> TenantLimits:
        return self.tenants.get(tenant, self.defaults)
