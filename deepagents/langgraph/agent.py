"""``LangGraphAgent``: a LangGraph graph run as a deepagents agent, durably.

The graph's thread is the task (``thread_id = task_id``) and its checkpoints are the task's
records (``StepSaver`` on ``TaskRecords``): a delivery after a crash resumes the graph from
its last checkpoint, at the node that had not finished. Calls inside a node are steps
(``graph_tools``, ``DeepAgentsChat``), so a re-run node replays the calls that had completed.

``interrupt(value)`` in a node parks the task through ``ctx.ask`` (no worker slot held while
it waits); the reply resumes the graph with ``Command(resume=...)``. Questions are numbered
by order (``worker/asking.py``), so each interrupt's number is recorded the first time it is
asked: a later delivery asks the answered ones again (their recorded answers come back at
once) to reach the number of the one still open.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson
from langchain_core.messages import BaseMessage
from langchain_core.messages.utils import convert_to_openai_messages
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, Durability, Interrupt
from pydantic import BaseModel, JsonValue

from deepagents.contract.agent import AgentContract
from deepagents.contract.context import TaskContext, current_context
from deepagents.contract.result import Result
from deepagents.contract.task import Task
from deepagents.errors import StepError
from deepagents.langgraph.chat_model import DeepAgentsChat
from deepagents.langgraph.middleware import DeepAgentsMiddleware
from deepagents.langgraph.records import TaskRecords
from deepagents.langgraph.saver import StepSaver
from deepagents.langgraph.tools import graph_tools
from deepagents.tools import Tool, ToolPolicy

ASKS = "lgask"  # the record kind: interrupt id -> its question's number


class InterruptReply(BaseModel):
    """The default reply to an interrupt: ``answer`` is what ``interrupt()`` returns."""

    answer: JsonValue


@dataclass(frozen=True)
class GraphKit:
    """What ``build_graph`` gets: the task, its tools as LangChain tools, chat models."""

    task: Task
    agent: str
    tools: Sequence[BaseTool]

    def chat(self, model: str) -> DeepAgentsChat:
        """A chat model calling ``model`` (a name under ``models:``) via wrap_model_call."""
        return DeepAgentsChat(model=model, agent=self.agent, task=self.task)

    def middleware(self, model: str, *, policy: ToolPolicy | None = None) -> DeepAgentsMiddleware:
        """A ``DeepAgentsMiddleware`` for ``create_agent``: its model calls go to ``model``
        via wrap_model_call, its tool calls via wrap_tool_call, each a step. ``policy``:
        that of the LangChain tools (not ``tools``, which have their own)."""
        return DeepAgentsMiddleware(model, task=self.task, agent=self.agent, policy=policy)


class LangGraphAgent(AgentContract):
    """Implement ``build_graph``: an uncompiled ``StateGraph`` (compiled here with the task's
    checkpoint saver) or a compiled one (``create_agent``'s: its saver is replaced by the
    task's). Override ``graph_input`` / ``output`` to map payload and state."""

    tools: ClassVar[Sequence[Tool]] = ()
    reply_model: ClassVar[type[BaseModel]] = InterruptReply
    reply_timeout_s: ClassVar[float] = 86_400.0
    recursion_limit: ClassVar[int] = 100
    # "sync": each super-step's checkpoint lands before the next starts, so a crash
    # re-runs at most the node in flight. "async" overlaps them (a node may run again).
    durability: ClassVar[Durability] = "sync"

    @abstractmethod
    def build_graph(
        self, kit: GraphKit
    ) -> StateGraph[Any] | CompiledStateGraph[Any, Any, Any, Any]: ...

    def graph_input(self, task: Task) -> Any:
        return dict(task.payload)

    def output(self, values: dict[str, Any]) -> dict[str, Any]:
        """The Result's output from the graph's final state (made JSON)."""
        decoded: dict[str, Any] = orjson.loads(orjson.dumps(values, default=_plain))
        return decoded

    def question(self, interrupt: Interrupt) -> str:
        value = interrupt.value
        if isinstance(value, str) and value:
            return value
        return orjson.dumps(value, default=_plain).decode()

    def resume_value(self, reply: BaseModel) -> Any:
        if isinstance(reply, InterruptReply):
            return reply.answer
        return reply.model_dump(mode="json")

    async def execute(self, context: dict[str, Any]) -> Result:
        task: Task = context["task"]
        ctx = current_context()
        kit = GraphKit(task, self.name, graph_tools(self.tools, task=task, agent=self.name))
        saver = StepSaver(TaskRecords(ctx))
        built = self.build_graph(kit)
        if isinstance(built, CompiledStateGraph):
            graph = built.copy({"checkpointer": saver})
        else:
            graph = built.compile(checkpointer=saver)
        config: RunnableConfig = {
            "configurable": {"thread_id": task.task_id},
            "recursion_limit": self.recursion_limit,
        }
        snapshot = await graph.aget_state(config)
        if snapshot.created_at is None:  # a first delivery: start with the payload
            await graph.ainvoke(self.graph_input(task), config, durability=self.durability)
        elif snapshot.next and not snapshot.interrupts:  # a crash cut a run short: resume
            await graph.ainvoke(None, config, durability=self.durability)
        await _answer_interrupts(self, ctx, graph, config)
        snapshot = await graph.aget_state(config)
        return Result(output=self.output(dict(snapshot.values)))


async def _answer_interrupts(
    agent: LangGraphAgent,
    ctx: TaskContext,
    graph: CompiledStateGraph[Any, Any, Any, Any],
    config: RunnableConfig,
) -> None:
    numbers = {k: int(v) for k, v in (await ctx.load_records(ASKS)).items()}
    asked = 0  # questions asked in this delivery (ctx.ask numbers them in order)
    resumed: set[str] = set()
    while interrupts := (await graph.aget_state(config)).interrupts:
        pending = interrupts[0]
        if pending.id in resumed:
            # Answered, yet pending again: asking once more would return the same reply
            # for ever. (A node's successive interrupts have ids of their own.)
            raise StepError(
                f"{agent.name}: interrupt {pending.id} is pending again after its reply "
                "resumed the graph"
            )
        resumed.add(pending.id)
        number = numbers.get(pending.id)
        if number is None:
            number = max(numbers.values(), default=0) + 1
            await ctx.save_records(ASKS, [(pending.id, str(number).encode())])
            numbers[pending.id] = number
        while asked < number - 1:  # answered before: their answers come back at once
            await _ask(agent, ctx, "(answered)")
            asked += 1
        reply = await _ask(agent, ctx, agent.question(pending))
        asked += 1
        resume = {pending.id: agent.resume_value(reply)}
        await graph.ainvoke(Command(resume=resume), config, durability=agent.durability)


async def _ask(agent: LangGraphAgent, ctx: TaskContext, question: str) -> BaseModel:
    return await ctx.ask(question, schema=agent.reply_model, timeout_s=agent.reply_timeout_s)


def _plain(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        return convert_to_openai_messages(value)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)
