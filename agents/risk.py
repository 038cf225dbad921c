"""RiskAgent: pre-trade margin check for futures orders.

margin = quantity × contract multiplier × price × margin rate; the order is rejected
when the margin exceeds 30% of the account's available funds. Reference data (multiplier,
margin rate per symbol) comes from ``agents/data/futures.csv``.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deepagents import AgentContract, InvalidInput, Result

MAX_MARGIN_SHARE = Decimal("0.30")


@dataclass(frozen=True, slots=True)
class Contract:
    symbol: str
    multiplier: Decimal
    margin_rate: Decimal


@cache
def contracts() -> dict[str, Contract]:
    text = resources.files("agents").joinpath("data/futures.csv").read_text(encoding="utf-8")
    return {
        row["symbol"]: Contract(
            row["symbol"], Decimal(row["contract_multiplier"]), Decimal(row["margin_rate"])
        )
        for row in csv.DictReader(text.splitlines())
    }


class Order(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    symbol: str = Field(min_length=1, max_length=16)
    side: Literal["buy", "sell"]
    quantity: int = Field(gt=0, le=1_000_000)
    price: Decimal = Field(gt=0, max_digits=18, decimal_places=6)
    available_funds: Decimal = Field(gt=0, max_digits=20, decimal_places=2)
    urgent: bool = False


def margin_for(order: Order) -> Decimal:
    contract = contracts().get(order.symbol)
    if contract is None:
        raise InvalidInput(f"unknown symbol {order.symbol!r}")
    return order.quantity * contract.multiplier * order.price * contract.margin_rate


class RiskAgent(AgentContract):
    name = "risk"
    version = "1.0.0"
    intents = ("risk_check", "trade")
    input_model = Order

    def prepare_context(self, task: Any) -> dict[str, Any]:
        try:
            order = Order.model_validate(task.payload)
        except ValidationError as exc:
            raise InvalidInput(str(exc)) from exc
        return {"order": order}

    def execute(self, context: dict[str, Any]) -> Result:
        order: Order = context["order"]
        margin = margin_for(order)
        share = margin / order.available_funds
        approved = share <= MAX_MARGIN_SHARE
        return Result(
            output={
                "symbol": order.symbol,
                "side": order.side,
                "margin": str(margin.quantize(Decimal("0.01"))),
                "margin_share": float(round(share, 6)),
                "approved": approved,
                "reason": None if approved else f"margin exceeds {MAX_MARGIN_SHARE:.0%} of funds",
            }
        )

    def post_process(self, result: Result) -> dict[str, Any]:
        return {"risk_score": min(1.0, float(result.output["margin_share"]))}
