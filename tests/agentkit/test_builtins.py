"""The built-ins one by one, in process, through ``run_tools`` against the model simulator
(a real HTTP server) and the session's Redis: PII is gone from the request that leaves the
process; the truncating budget keeps a tool result with the call that asked for it."""

from __future__ import annotations

from typing import Any

from deepagents.agentkit import (
    AgentMiddleware,
    ContextBudget,
    ModelHandler,
    ModelRequest,
    ModelResponse,
    PiiRedaction,
    StopReason,
    run_tools,
)
from deepagents.config.middleware import BudgetStrategy, PiiKind
from deepagents.modelcall import ModelCalls


class Outbound(AgentMiddleware):
    """Innermost: keeps the messages of each request as they leave for the model."""

    def __init__(self) -> None:
        self.sent: list[list[dict[str, Any]]] = []

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        self.sent.append([dict(m) for m in request.messages])
        return await handler(request)


PROMPT = (
    "Mail ana.lopez@example.org or call +44 20 7946 0958; card 4111 1111 1111 1111, "
    "IBAN GB82 WEST 1234 5698 7654 32, host 10.1.2.3; order 1234567890123 stays."
)


async def test_pii_is_redacted_before_the_request_leaves(calls: ModelCalls) -> None:
    outbound = Outbound()
    result = await run_tools(
        model="sim",
        messages=[{"role": "user", "content": PROMPT}],
        middleware=[PiiRedaction(), outbound],
    )
    assert result.stop is StopReason.FINAL_ANSWER
    sent = outbound.sent[0][0]["content"]
    assert sent == (
        "Mail [email] or call [phone]; card [card], IBAN [iban], host [ip]; "
        "order 1234567890123 stays."  # not a card: the Luhn check fails
    )
    assert result.messages[0]["content"] == PROMPT  # the run's own history is untouched


async def test_tool_call_arguments_are_redacted_too(calls: ModelCalls) -> None:
    outbound = Outbound()
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "mail", "arguments": '{"to": "ana.lopez@example.org"}'},
    }
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "mail her"},
        {"role": "assistant", "content": "on it", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sent to ana.lopez@example.org"},
    ]
    await run_tools(model="sim", messages=history, middleware=[PiiRedaction(), outbound])
    sent = outbound.sent[0]
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == '{"to": "[email]"}'
    assert sent[1]["content"] == "on it" and sent[2]["content"] == "sent to [email]"


async def test_only_the_kinds_asked_for(calls: ModelCalls) -> None:
    outbound = Outbound()
    await run_tools(
        model="sim",
        messages=[{"role": "user", "content": PROMPT}],
        middleware=[PiiRedaction(kinds=[PiiKind.EMAIL]), outbound],
    )
    assert "[email]" in outbound.sent[0][0]["content"]
    assert "10.1.2.3" in outbound.sent[0][0]["content"]


def _history(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    for i in range(turns):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        messages.append({"role": "user", "content": f"question {i} " + "x" * 400})
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "y" * 400})
    messages.append({"role": "user", "content": "and now?"})
    return messages


async def test_truncating_keeps_tool_results_with_their_calls(calls: ModelCalls) -> None:
    outbound = Outbound()
    budget = ContextBudget(strategy=BudgetStrategy.TRUNCATE, keep_last=3, window_tokens=1000)
    result = await run_tools(
        model="sim", messages=_history(10), middleware=[budget, outbound], max_turns=1
    )
    sent = outbound.sent[0]
    assert sent[0] == {"role": "system", "content": "be brief"}
    assert "earlier messages were left out" in sent[1]["content"]
    assert sent[2]["role"] != "tool"  # never a tool result without the call that asked
    assert sent[-1]["content"] == "and now?"
    assert result.messages[: len(sent)] == sent  # the run goes on from the shorter history
