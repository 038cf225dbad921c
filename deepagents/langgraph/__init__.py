"""LangGraph graphs run durably on deepagents (the extra ``deepagents[langgraph]``).

``LangGraphAgent`` runs a graph as an agent; ``StepSaver`` is the checkpoint saver on the
task's records; ``graph_tools`` and ``DeepAgentsChat`` route a node's tool and model calls
through ``wrap_tool_call`` and ``wrap_model_call`` as steps, and ``DeepAgentsMiddleware``
does so for LangChain's ``create_agent`` graphs (docs/langgraph.md).
Importing ``deepagents`` never imports this package (nor LangGraph).
"""

from deepagents._internal.extras import require_extra

require_extra("langgraph", "LangGraph graphs (deepagents.langgraph)")

from deepagents.langgraph.agent import GraphKit, InterruptReply, LangGraphAgent  # noqa: E402
from deepagents.langgraph.chat_model import DeepAgentsChat  # noqa: E402
from deepagents.langgraph.middleware import DeepAgentsMiddleware  # noqa: E402
from deepagents.langgraph.records import TaskRecords, ThreadRecords  # noqa: E402
from deepagents.langgraph.saver import StepSaver  # noqa: E402
from deepagents.langgraph.tools import graph_tool, graph_tools  # noqa: E402

__all__ = [
    "DeepAgentsChat",
    "DeepAgentsMiddleware",
    "GraphKit",
    "InterruptReply",
    "LangGraphAgent",
    "StepSaver",
    "TaskRecords",
    "ThreadRecords",
    "graph_tool",
    "graph_tools",
]
