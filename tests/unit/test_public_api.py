"""The public surface is deliberate: the names ``deepagents`` exports, the error codes on
the wire, the exception tree and the version. Changing any of them means changing this."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import pkgutil
import tomllib
from collections.abc import Iterator
from pathlib import Path

import deepagents
from deepagents import DeepAgentsError, ErrorCode

REPO = Path(__file__).resolve().parents[2]

PUBLIC_NAMES = {
    "AgentContract",
    "Delegation",
    "DeepAgentsError",
    "ErrorCode",
    "InboxAction",
    "InboxAnswer",
    "InvalidInput",
    "Orchestrator",
    "Result",
    "ResultStatus",
    "RetryableError",
    "Settings",
    "Task",
    "TaskContext",
    "TaskHandle",
    "WebhookSignatureError",
    "Worker",
    "__version__",
    "current_context",
    "load_config",
    "load_settings",
    "verify_signature",
}

# The wire strings: clients branch on them, so none may be renamed or dropped.
ERROR_CODES = {
    # Result.error.code
    "invalid_input",
    "unroutable",
    "deadline_exceeded",
    "agent_error",
    "model_unavailable",
    "dropped",
    "cancelled",
    "rejected",
    "dead_lettered",
    "response_too_large",
    "remote_protocol_error",
    # human replies
    "not_waiting",
    "already_replied",
    "invalid_reply",
    "reply_timeout",
    "delegation_too_deep",
    "circuit_open",
    "step_error",
    "state_too_large",
    "step_too_large",
    "invalid_result",  # the agent broke its contract (issue 38)
    "tool_error",
    "tool_invalid_arguments",
    "tool_protocol_error",
    "tool_timeout",
    "tool_unavailable",
    # exceptions
    "error",
    "config_error",
    "payload_too_large",
    "idempotency_conflict",
    "overloaded",
    "transport_error",
    "not_replicated",
    "redis_not_safe",
    "group_vanished",
    "result_timeout",
    "not_found",
    "audit_store_error",
    "audit_unavailable",
    "migration_error",
    "http_error",
    # dead-letter reasons
    "decode_error",
    "too_large",
    "payload_lost",
    "max_deliveries",
    "state_incompatible",
    # gateway problem documents
    "empty_body",
    "invalid_json",
    "duplicate_key",
    "non_finite_number",
    "number_too_long",
    "number_out_of_range",
    "nesting_too_deep",
    "too_many_keys",
    "bad_string",
    "unauthorized",
    "method_not_allowed",
    "request_timeout",
    "too_late",
    "body_too_large",
    "unsupported_media_type",
    "headers_too_large",
    "validation_error",
    "unknown_intent",
    "invalid_payload",
    "deadline_passed",
    "not_before_too_far",
    "batch_too_large",
    "rate_limited",
    "too_many_in_flight",
    "internal_error",
    "unavailable",
    # the agent toolkit's middleware
    "guardrail_denied",
    "limit_exceeded",
    "loop_detected",
}


# Top-level modules of optional extras that a module may import at its top.
OPTIONAL = {"grpc", "google", "mcp", "a2a"}


def _package_classes() -> Iterator[type]:
    """Every class defined in the package's modules (``__main__`` would run the CLI)."""
    prefix = deepagents.__name__ + "."
    for info in pkgutil.walk_packages(deepagents.__path__, prefix):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and exc.name.split(".")[0] in OPTIONAL:
                continue  # the gRPC wire, in an environment without the grpc extra
            raise
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:
                yield cls


def test_the_public_api_is_exactly_these_names() -> None:
    assert set(deepagents.__all__) == PUBLIC_NAMES
    assert all(hasattr(deepagents, name) for name in deepagents.__all__)


def test_the_error_codes_are_exactly_these() -> None:
    assert {code.value for code in ErrorCode} == ERROR_CODES


def test_every_exception_of_the_package_derives_from_deepagents_error() -> None:
    exceptions = [c for c in _package_classes() if issubclass(c, BaseException)]
    # The walk reached the modules of every layer (these once stood outside the tree).
    found = {c.__qualname__ for c in exceptions}
    assert {"DecodeError", "RuleError", "GatewayError", "ProviderError", "Problem"} <= found
    outside = [c.__qualname__ for c in exceptions if not issubclass(c, DeepAgentsError)]
    assert outside == []


def test_every_exception_code_is_an_error_code() -> None:
    errors = [c for c in _package_classes() if issubclass(c, DeepAgentsError)]
    loose = [(c.__qualname__, c.code) for c in errors if not isinstance(c.code, ErrorCode)]
    assert loose == []


def test_the_version_has_one_source() -> None:
    """pyproject.toml reads the version from ``deepagents.__version__``; the installed
    metadata, built from pyproject.toml, agrees with it."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "deepagents.__version__"}
    assert importlib.metadata.version("deepagents-middleware") == deepagents.__version__
