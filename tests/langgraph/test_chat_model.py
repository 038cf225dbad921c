"""``DeepAgentsChat`` and ``graph_tools`` in a LangGraph tool loop (``ToolNode``), outside a
task: the model simulator on loopback answers through ``wrap_model_call``, the tool runs
through ``wrap_tool_call``, and the model reads the tool's result back."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from deepagents.langgraph import DeepAgentsChat, graph_tools
from deepagents.modelcall import ModelCalls
from deepagents.tools import tool
from tests.agentkit.conftest import calls, sim  # noqa: F401 -- fixtures

SEEN: list[str] = []


@tool(read_only=True)
def lookup(city: str) -> dict[str, Any]:
    """The weather in ``city``."""
    SEEN.append(city)
    return {"city": city, "sky": "clear"}


async def test_a_tool_loop_calls_the_model_and_the_tool_through_deepagents(
    calls: ModelCalls,  # noqa: F811 -- the fixture
) -> None:
    SEEN.clear()
    tools = graph_tools([lookup], task=None, agent="weather")
    model = DeepAgentsChat(model="sim", agent="weather").bind_tools(tools)

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    graph.add_edge("agent", END)
    app = graph.compile()

    ask = 'What is the weather?\nsim: call lookup {"city": "Oslo"}'
    final = await app.ainvoke({"messages": [HumanMessage(ask)]})
    messages = final["messages"]
    assert SEEN == ["Oslo"]
    first = messages[1]
    assert isinstance(first, AIMessage)
    assert first.tool_calls[0]["name"] == "lookup"
    assert first.tool_calls[0]["args"] == {"city": "Oslo"}
    assert isinstance(messages[2], ToolMessage) and "clear" in str(messages[2].content)
    last = messages[-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert "lookup=" in str(last.content) and "clear" in str(last.content)


async def test_create_agent_under_the_middleware_uses_deepagents_calls(
    calls: ModelCalls,  # noqa: F811 -- the fixture
) -> None:
    """LangChain's ``create_agent`` under ``DeepAgentsMiddleware``: the simulator answers
    (not the graph's own model), a graph_tools tool passes through as it is, and a
    LangChain tool that raises goes through ``wrap_tool_call``: a failed call the model
    reads, an error ``ToolMessage``."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.tools import tool as lc_tool

    from deepagents.langgraph import DeepAgentsMiddleware

    SEEN.clear()

    @lc_tool
    def broken(reason: str) -> str:
        """Always fails."""
        raise ValueError(f"broken: {reason}")

    graph = create_agent(
        FakeListChatModel(responses=["the graph's own model"]),
        tools=[*graph_tools([lookup], task=None, agent="weather"), broken],
        middleware=[DeepAgentsMiddleware("sim", agent="weather")],
    )
    ask = 'Weather?\nsim: call lookup {"city": "Oslo"}\nsim: call broken {"reason": "x"}'
    final = await graph.ainvoke({"messages": [HumanMessage(ask)]})
    messages = final["messages"]
    assert SEEN == ["Oslo"]
    results = {m.name: m for m in messages if isinstance(m, ToolMessage)}
    assert "clear" in str(results["lookup"].content) and results["lookup"].status == "success"
    assert results["broken"].status == "error" and "broken: x" in str(results["broken"].content)
    last = messages[-1]
    assert isinstance(last, AIMessage) and "tool results:" in str(last.content)
