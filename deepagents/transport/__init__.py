"""Transport layer: the message-bus protocols and their Redis Streams implementation."""

from deepagents.transport.base import (
    Admin,
    ChildWaits,
    HumanWaits,
    Inspection,
    MessageBus,
    Records,
    Replies,
    StepLog,
    StreamRef,
    TaskQueue,
)
from deepagents.transport.keys import Keys, ShardKeys, shard_of
from deepagents.transport.states import TaskState

__all__ = [
    "Admin",
    "ChildWaits",
    "HumanWaits",
    "Inspection",
    "Keys",
    "MessageBus",
    "Records",
    "Replies",
    "ShardKeys",
    "StepLog",
    "StreamRef",
    "TaskQueue",
    "TaskState",
    "shard_of",
]
