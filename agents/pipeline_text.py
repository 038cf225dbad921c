"""The research pipeline's pure parts: the prompts it sends, the plan it reads back from the
planner's answer, and the keyword retrieval over the sources a task carries.

Nothing here does I/O or keeps state, so the pipeline's code between its durable steps stays
deterministic: given the same recorded step results, a resumed run builds the same prompts.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from agents.research import keywords

# The sub-questions a plan falls back to when the planner's answer lists too few of its own
# (a model answering off-format, or the model simulator's placeholder words).
ASPECTS = (
    "background and definitions",
    "current state and recent changes",
    "risks and failure modes",
    "outlook and open questions",
    "key figures and evidence",
    "stakeholders and incentives",
    "alternatives and comparisons",
    "practical recommendations",
)
_NUMBERED = re.compile(r"^\s*(?:\d+[.)]|[-*])\s+(.{8,200}?)\s*$")
EXCERPT_CHARS = 600


def plan_messages(topic: str, lanes: int) -> list[dict[str, str]]:
    return [
        {
            "role": "system",
            "content": f"You plan research. List exactly {lanes} sub-questions, one per "
            "line, numbered 1. 2. 3. Nothing else.",
        },
        {"role": "user", "content": f"Topic: {topic}"},
    ]


def plan_questions(topic: str, answer: str, lanes: int, given: Sequence[str]) -> list[str]:
    """The ``lanes`` sub-questions: the request's own first, then the planner's numbered
    lines, then the default aspects of the topic."""
    listed = [m.group(1) for line in answer.splitlines() if (m := _NUMBERED.match(line))]
    questions: list[str] = []
    for q in [*given, *listed, *(f"{topic}: {aspect}" for aspect in ASPECTS)]:
        if q not in questions:
            questions.append(q)
    return questions[:lanes]


def index_sources(sources: Sequence[dict[str, str]]) -> list[dict[str, Any]]:
    """Each source's id, title and top keywords (the retrieval index)."""
    return [
        {"id": i, "title": s["title"], "keywords": keywords(f"{s['title']} {s['text']}", 12)[0]}
        for i, s in enumerate(sources)
    ]


def search(
    question: str, index: Sequence[dict[str, Any]], sources: Sequence[dict[str, str]], k: int = 3
) -> list[dict[str, Any]]:
    """The ``k`` sources sharing most keywords with ``question``, each with an excerpt."""
    wanted = Counter(keywords(question, 20)[0])
    scored = [(sum(wanted[w] for w in entry["keywords"]), entry["id"]) for entry in index]
    best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[:k]
    return [
        {
            "id": i,
            "title": sources[i]["title"],
            "score": score,
            "excerpt": sources[i]["text"][:EXCERPT_CHARS],
        }
        for score, i in best
    ]


def analyse_messages(
    topic: str, question: str, hits: Sequence[dict[str, Any]]
) -> list[dict[str, str]]:
    context = "\n\n".join(f"[{h['id']}] {h['title']}: {h['excerpt']}" for h in hits)
    return [
        {
            "role": "system",
            "content": "Answer the research question from the excerpts only; cite them as "
            "[n]. Say so when they do not answer it.",
        },
        {
            "role": "user",
            "content": f"Topic: {topic}\nQuestion: {question}\n\n{context or '(no sources)'}",
        },
    ]


def condense_messages(question: str, analysis: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "Condense the analysis into one sentence for a report."},
        {"role": "user", "content": f"Question: {question}\n\nAnalysis: {analysis}"},
    ]


def draft_messages(topic: str, findings: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    lines = "\n".join(f"- {f['question']}: {f['summary']}" for f in findings)
    return [
        {"role": "system", "content": "Write a short research report from the findings."},
        {"role": "user", "content": f"Topic: {topic}\n\nFindings:\n{lines}"},
    ]


def revise_messages(draft: str, feedback: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "Revise the report as the reviewer asks."},
        {"role": "user", "content": f"Report:\n{draft}\n\nReviewer: {feedback}"},
    ]


def summary_messages(topic: str, draft: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "Write a three-sentence executive summary."},
        {"role": "user", "content": f"Topic: {topic}\n\nReport:\n{draft}"},
    ]


def references(findings: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every source cited by a branch, once, in order of first use."""
    seen: dict[int, dict[str, Any]] = {}
    for finding in findings:
        for hit in finding["sources"]:
            seen.setdefault(hit["id"], {"id": hit["id"], "title": hit["title"]})
    return list(seen.values())


def offline_text(*parts: str) -> str:
    """What a model step answers when no model can: the parts' most frequent words, marked."""
    top, _ = keywords(" ".join(parts), 8)
    return "(offline) " + (", ".join(top) if top else "nothing to summarise")
