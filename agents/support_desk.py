"""SupportDeskAgent: the agent toolkit in one example (docs/tools.md).

A customer's request goes to the model with two Python tools, ``lookup_order`` (read-only:
retried when it fails) and ``refund`` (destructive: a person approves it first), and the
tools of the shipping service's MCP server (``agents/shipping_mcp.py``, started by the
worker over stdio: ``shipping_status``). The agent
calls ``run_tools`` once; its chain comes from ``agents.support_desk.middleware`` in
``config/deepagents.yaml``: ``approval`` (a refund waits for a person, who may approve,
edit the amount or reject), then the ``guardrail`` (``refund_policy``: no refund over
500 EUR or the order's total, however it was asked or edited), ``loop_detection``,
``limits`` and ``pii_redaction``.

Against the model simulator, script the model in the request::

    deepagents publish --intent support --wait 5 --payload '{"request":
      "Refund order A-1001.\\nsim: call lookup_order {\\"order_id\\": \\"A-1001\\"}\\nsim: then\\n
       sim: call refund {\\"order_id\\": \\"A-1001\\", \\"amount_eur\\": 42}"}'
    deepagents tasks waiting                  # the refund asks for approval
    deepagents reply TASK_ID --answer '{"verdict": "approve"}'
"""

from __future__ import annotations

from typing import Any

from deepagents import AgentContract, Result
from deepagents.agentkit import run_tools
from deepagents.contract.toolcalls import ToolCall
from deepagents.tools import tool

# A stand-in for the shop's order system.
ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {"status": "delivered", "total_eur": 42.0, "customer": "ana"},
    "A-1002": {"status": "lost in transit", "total_eur": 780.0, "customer": "ben"},
}
SYSTEM = (
    "You are a support agent. Look the order up before you refund it; refund at most what "
    "was paid. Answer the customer in two sentences."
)


@tool(read_only=True, timeout_s=5)
def lookup_order(order_id: str) -> dict[str, Any]:
    """The order's status, total and customer."""
    order = ORDERS.get(order_id)
    return {"order_id": order_id, **order} if order else {"error": f"no order {order_id}"}


@tool(destructive=True, timeout_s=10)
def refund(order_id: str, amount_eur: float, idempotency_key: str | None = None) -> dict[str, Any]:
    """Refund ``amount_eur`` of the order to the customer."""
    # A real one calls the payment provider with ``idempotency_key`` (the same on every
    # delivery of the task), so a refund retried after a crash is made once.
    return {"order_id": order_id, "refunded_eur": amount_eur, "reference": idempotency_key}


MAX_REFUND_EUR = 500.0


def refund_policy(call: ToolCall) -> bool | str:
    """The guardrail's policy: True lets the call run; a string refuses it, saying why (an
    exception refuses it too: the guardrail fails closed)."""
    if call.name != "refund":
        return True
    amount = float(call.arguments["amount_eur"])
    order = ORDERS.get(str(call.arguments["order_id"]))
    if order is None or amount > min(MAX_REFUND_EUR, order["total_eur"]):
        return f"a refund of {amount} EUR is over what this desk may refund"
    return True


class SupportDeskAgent(AgentContract):
    name = "support_desk"
    version = "1.0.0"
    intents = ("support",)

    async def execute(self, context: dict[str, Any]) -> Result:
        request = str(context["payload"]["request"])
        # The shipping service's tools, from its MCP server (one pooled session per worker).
        from deepagents.tools.mcp import mcp_tools  # the mcp extra

        shipping = await mcp_tools("shipping")
        result = await run_tools(
            model="research",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": request}],
            tools=[lookup_order, refund, *shipping],
            max_turns=6,
            task=context["task"],
        )
        return Result(
            output={"answer": result.text, "stop": result.stop, "tool_calls": result.tool_calls}
        )
