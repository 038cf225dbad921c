"""ResearchAgent: summarises a text with a model, through ``wrap_model_call``.

The model is the one named ``research`` under ``models:`` in the config (the demo points
it at the model simulator). When no model is available (no ``ModelCalls`` in this context,
the model is not configured, or it cannot answer now) the agent answers with a local
extractive summary (the most frequent content words), marked ``degraded``.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deepagents import AgentContract, Result
from deepagents.contract.task import Task
from deepagents.modelcall import ModelCalls, current_model_calls, wrap_model_call

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
MODEL = "research"
PROMPT_TEXT_CHARS = 12_000  # about 3,000 tokens of source text: fits small context windows


class ResearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str = Field(min_length=1, max_length=200)
    text: str = Field(default="", max_length=100_000)
    simulated_latency_ms: int = Field(default=20, ge=0, le=10_000, description="offline mode")


def keywords(text: str, count: int = 5) -> tuple[list[str], int]:
    words = [w for w in re.findall(r"[a-z]+", text.lower()) if w not in _STOP]
    return [w for w, _ in Counter(words).most_common(count)], len(words)


def offline_summary(request: ResearchRequest) -> str:
    top, _ = keywords(request.text)
    return f"{request.topic}: " + (", ".join(top) if top else "no text to summarise")


def messages(request: ResearchRequest) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "Summarise the text in three sentences for an analyst."},
        {
            "role": "user",
            "content": f"Topic: {request.topic}\n\n{request.text[:PROMPT_TEXT_CHARS]}",
        },
    ]


class ResearchAgent(AgentContract):
    name = "research"
    version = "0.2.0"
    intents = ("research",)
    input_model = ResearchRequest

    def __init__(self, model_calls: ModelCalls | None = None) -> None:
        self._calls = model_calls

    async def execute(self, context: dict[str, Any]) -> Result:
        request = ResearchRequest.model_validate(context["payload"])
        task = context.get("task")
        top, count = keywords(request.text)
        output: dict[str, Any] = {"topic": request.topic, "keywords": top, "words": count}
        calls = self._calls or current_model_calls()
        if calls is None or MODEL not in calls.models:
            await asyncio.sleep(request.simulated_latency_ms / 1000)
            output.update(summary=offline_summary(request), model=None)
            return Result(output=output, degraded=True)
        reply = await wrap_model_call(
            MODEL,
            messages(request),
            calls=calls,
            task=task if isinstance(task, Task) else None,
            agent=self.name,
            max_tokens=256,
            fallback=lambda _info: offline_summary(request),
        )
        output.update(summary=reply.text, model=reply.model)
        return reply.apply(Result(output=output))
