"""ResearchAgent: summarises a text. Until the model-call layer lands it summarises
locally (extractive: the most frequent content words), after a simulated model latency."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deepagents import AgentContract, Result

_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "that",
        "the",
        "to",
        "was",
        "were",
        "with",
    ]
)


class ResearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str = Field(min_length=1, max_length=200)
    text: str = Field(default="", max_length=100_000)
    simulated_latency_ms: int = Field(default=20, ge=0, le=10_000)


class ResearchAgent(AgentContract):
    name = "research"
    version = "0.1.0"
    intents = ("research",)
    input_model = ResearchRequest

    async def execute(self, context: dict[str, Any]) -> Result:
        request = ResearchRequest.model_validate(context["payload"])
        await asyncio.sleep(request.simulated_latency_ms / 1000)
        words = [w for w in re.findall(r"[a-z]+", request.text.lower()) if w not in _STOP]
        keywords = [w for w, _ in Counter(words).most_common(5)]
        return Result(output={"topic": request.topic, "keywords": keywords, "words": len(words)})
