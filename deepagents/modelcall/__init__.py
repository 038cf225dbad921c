"""Model calls: ``wrap_model_call`` makes every LLM call reliable, bounded, metered, traced.

Typical use, once per event loop (the worker's bootstrap)::

    async with ModelCalls(config.models, redis, prefix=settings.prefix) as calls:
        with use_model_calls(calls):
            reply = await wrap_model_call("research", prompt="...", task=task)
            vectors = (await embed("embedder", ["a text"], task=task)).vectors

Names are imported lazily: importing ``deepagents.modelcall`` for one name must not pull in
httpx, hvac and redis on the way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepagents._internal.lazy import lazy_exports

if TYPE_CHECKING:
    from deepagents.config.models import ModelConfig
    from deepagents.modelcall.calls import ModelCalls
    from deepagents.modelcall.embedding import embed
    from deepagents.modelcall.errors import (
        ContentFiltered,
        ContextLengthExceeded,
        CredentialError,
        InputTooLong,
        InvalidRequest,
        ModelCallError,
        ModelDeadlineExceeded,
        ModelRequestRejected,
        ModelUnavailable,
        ResponseTooLarge,
    )
    from deepagents.modelcall.record import AttemptRecord, EmbeddingReply, FinishReason, ModelReply
    from deepagents.modelcall.usage import (
        UsageLedger,
        current_model_calls,
        current_usage,
        usage_scope,
        use_model_calls,
    )
    from deepagents.modelcall.wrap import FallbackInfo, wrap_model_call

_WHERE = {
    "ModelCalls": "calls",
    "ModelConfig": "deepagents.config.models",
    "AttemptRecord": "record",
    "EmbeddingReply": "record",
    "FinishReason": "record",
    "ModelReply": "record",
    "embed": "embedding",
    "FallbackInfo": "wrap",
    "wrap_model_call": "wrap",
    **dict.fromkeys(
        ("UsageLedger", "current_model_calls", "current_usage", "usage_scope", "use_model_calls"),
        "usage",
    ),
    **dict.fromkeys(
        (
            "ContentFiltered",
            "ContextLengthExceeded",
            "CredentialError",
            "InputTooLong",
            "InvalidRequest",
            "ModelCallError",
            "ModelDeadlineExceeded",
            "ModelRequestRejected",
            "ModelUnavailable",
            "ResponseTooLarge",
        ),
        "errors",
    ),
}

__all__ = [
    "AttemptRecord",
    "ContentFiltered",
    "ContextLengthExceeded",
    "CredentialError",
    "EmbeddingReply",
    "FallbackInfo",
    "FinishReason",
    "InputTooLong",
    "InvalidRequest",
    "ModelCallError",
    "ModelCalls",
    "ModelConfig",
    "ModelDeadlineExceeded",
    "ModelReply",
    "ModelRequestRejected",
    "ModelUnavailable",
    "ResponseTooLarge",
    "UsageLedger",
    "current_model_calls",
    "current_usage",
    "embed",
    "usage_scope",
    "use_model_calls",
    "wrap_model_call",
]


if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        globals(),
        {
            name: m if m.startswith("deepagents.") else f"{__name__}.{m}"
            for name, m in _WHERE.items()
        },
        __all__,
    )
