"""ResearchGraphAgent: a LangGraph research graph run durably by deepagents (the extra
``deepagents[langgraph]``; docs/langgraph.md).

plan -> search (a tool, through ``wrap_tool_call``) -> draft -> approve (``interrupt()``: the
task parks until a person replies) -> publish. The thread is the task: a worker killed at
any node resumes the graph at that node on the next delivery, and the search that had
completed is not made again.

Reply to the approval with ``{"answer": "approve"}``, ``{"answer": "reject"}``, or
``{"answer": "<an edited answer>"}`` (published as written).
"""

from __future__ import annotations

import re
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from deepagents.langgraph import GraphKit, LangGraphAgent
from deepagents.tools import tool

NOTES = {
    "tides": "Tides rise and fall twice a day because the Moon's gravity pulls the oceans.",
    "moon": "The Moon orbits Earth every 27.3 days and always shows the same face.",
    "sun": "The Sun's gravity adds a smaller tide; spring tides come when Sun and Moon align.",
    "ocean": "Ocean basins shape the tides: the Bay of Fundy's range reaches 16 metres.",
}


@tool(read_only=True, timeout_s=5)
def search_notes(terms: list[str]) -> list[str]:
    """The notes that mention any of ``terms``."""
    wanted = {t.lower() for t in terms}
    return [text for key, text in NOTES.items() if key in wanted]


class Research(TypedDict, total=False):
    question: str
    terms: list[str]
    notes: list[str]
    draft: str
    verdict: str
    answer: str


class ResearchGraphAgent(LangGraphAgent):
    name = "research_graph"
    version = "1.0.0"
    intents = ("research_graph",)
    tools = (search_notes,)

    def build_graph(self, kit: GraphKit) -> StateGraph[Any]:
        (search,) = kit.tools

        def plan(state: Research) -> Research:
            words = re.findall(r"[a-z]+", state["question"].lower())
            return {"terms": sorted({w for w in words if w in NOTES} or {"tides"})}

        async def find(state: Research) -> Research:
            found = await search.ainvoke({"terms": state["terms"]})
            return {"notes": list(found) if isinstance(found, list) else []}

        def draft(state: Research) -> Research:
            notes = state.get("notes", [])
            return {"draft": " ".join(notes) if notes else "Nothing found in the notes."}

        def approve(state: Research) -> Research:
            reply = interrupt({"approve": "Publish this answer?", "draft": state["draft"]})
            if reply == "approve":
                return {"verdict": "approved", "answer": state["draft"]}
            if reply == "reject":
                return {"verdict": "rejected", "answer": ""}
            return {"verdict": "edited", "answer": str(reply)}

        graph = StateGraph(Research)
        for name, node in (("plan", plan), ("search", find), ("draft", draft)):
            graph.add_node(name, node)
        graph.add_node("approve", approve)
        graph.add_edge(START, "plan")
        graph.add_edge("plan", "search")
        graph.add_edge("search", "draft")
        graph.add_edge("draft", "approve")
        graph.add_edge("approve", END)
        return graph
