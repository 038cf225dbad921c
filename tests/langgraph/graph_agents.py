"""Graphs the LangGraph tests run on real worker processes. Each writes what it does to
files under ``$LG_DIR`` (one line per effect), so a test counts effects across processes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from deepagents.langgraph import GraphKit, LangGraphAgent
from deepagents.tools import tool


def _note(name: str, line: str) -> None:
    with (Path(os.environ["LG_DIR"]) / name).open("a") as out:
        out.write(line + "\n")


@tool(idempotent=True)
def record_fact(fact: str) -> dict[str, Any]:
    """Record a fact (a side effect the test counts)."""
    _note("tool", f"{fact} {os.getpid()}")
    return {"recorded": fact}


class Crash(TypedDict, total=False):
    topic: str
    drafted: str
    recorded: str
    done: bool


class CrashGraphAgent(LangGraphAgent):
    """node1 has a side effect; node2 calls a tool, then hangs once (the test kills its
    worker there; or sleeps ``$LG_PAUSE_S`` while the test pauses it); node3 ends."""

    name = "crashgraph"
    version = "1.0.0"
    intents = ("crashgraph",)
    tools = (record_fact,)

    def build_graph(self, kit: GraphKit) -> StateGraph[Any]:
        (record,) = kit.tools

        def node1(state: Crash) -> Crash:
            _note("node1", f"{state['topic']} {os.getpid()}")
            return {"drafted": f"draft of {state['topic']}"}

        async def node2(state: Crash) -> Crash:
            _note("node2", f"{state['topic']} {os.getpid()}")
            answer = await record.ainvoke({"fact": state["drafted"]})
            hang = Path(os.environ["LG_DIR"]) / "hung"
            if not hang.exists():  # the first run: tell the test, and wait to be killed
                hang.write_text(str(os.getpid()))
                pause = os.environ.get("LG_PAUSE_S")  # or sleep, then go on (the fence test)
                await (asyncio.sleep(float(pause)) if pause else asyncio.Event().wait())
            return {"recorded": str(answer)}

        def node3(state: Crash) -> Crash:
            _note("node3", f"{state['topic']} {os.getpid()}")
            return {"done": True}

        graph = StateGraph(Crash)
        graph.add_node("node1", node1)
        graph.add_node("node2", node2)
        graph.add_node("node3", node3)
        graph.add_edge(START, "node1")
        graph.add_edge("node1", "node2")
        graph.add_edge("node2", "node3")
        graph.add_edge("node3", END)
        return graph


class Approval(TypedDict, total=False):
    draft: str
    asks: int
    double: bool
    answers: list[Any]


class ApprovalGraphAgent(LangGraphAgent):
    """Asks ``asks`` questions in turn through ``interrupt()`` (0: none; with ``double``,
    two per node run) and returns the answers it got."""

    name = "approvalgraph"
    version = "1.0.0"
    intents = ("approvalgraph",)

    def build_graph(self, kit: GraphKit) -> StateGraph[Any]:
        def draft(state: Approval) -> Approval:
            _note("draft", state["draft"])
            return {"answers": []}

        def approve(state: Approval) -> Approval:
            answers = list(state.get("answers", []))
            answers.append(interrupt({"question": len(answers) + 1, "draft": state["draft"]}))
            if state.get("double"):  # a second interrupt in the same node run
                answers.append(interrupt({"question": "again", "draft": state["draft"]}))
            return {"answers": answers}

        def more(state: Approval) -> str:
            return "approve" if len(state.get("answers", [])) < state.get("asks", 0) else END

        graph = StateGraph(Approval)
        graph.add_node("draft", draft)
        graph.add_node("approve", approve)
        graph.add_edge(START, "draft")
        graph.add_conditional_edges("draft", more, ["approve", END])
        graph.add_conditional_edges("approve", more, ["approve", END])
        return graph


class ReactGraphAgent(LangGraphAgent):
    """LangChain's ``create_agent`` under ``DeepAgentsMiddleware``. The simulated model,
    scripted by the payload's ``prompt``, asks for ``note_fact`` (a LangChain tool: it
    counts its calls in a file) and ``wait_once`` (hangs on its first run: the test kills
    the worker there, after ``note_fact`` completed) in one turn, then answers."""

    name = "reactgraph"
    version = "1.0.0"
    intents = ("reactgraph",)

    def build_graph(self, kit: GraphKit) -> Any:
        from langchain.agents import create_agent
        from langchain_core.language_models.fake_chat_models import FakeListChatModel
        from langchain_core.tools import tool as lc_tool

        from deepagents.tools import ToolPolicy

        @lc_tool
        def note_fact(fact: str) -> str:
            """Note a fact (a side effect the test counts)."""
            _note("tool", f"{fact} {os.getpid()}")
            return f"noted {fact}"

        @lc_tool
        async def wait_once() -> str:
            """Hang on the first run (the test kills the worker there)."""
            hang = Path(os.environ["LG_DIR"]) / "hung"
            if not hang.exists():
                hang.write_text(str(os.getpid()))
                await asyncio.Event().wait()
            return "waited"

        # Never called: the middleware puts the deployment's model in its place.
        unused = FakeListChatModel(responses=["not routed through deepagents"])
        return create_agent(  # compiled: LangGraphAgent gives it the task's saver
            unused,
            tools=[note_fact, wait_once],
            middleware=[kit.middleware("sim", policy=ToolPolicy(timeout_s=600, retries=0))],
        )

    def graph_input(self, task: Any) -> Any:
        return {"messages": [{"role": "user", "content": task.payload["prompt"]}]}
