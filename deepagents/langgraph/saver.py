"""``StepSaver``: LangGraph's ``BaseCheckpointSaver`` on deepagents' records.

A thread's records are fields of one hash (``records.py``), three kinds of them:

- ``c<ns><id>``: one per checkpoint, its skeleton: channel versions, versions seen, metadata
  and parent id, without the channel values;
- ``b<ns><channel><version>``: one channel value, written once, when its version is new
  (``new_versions``): a checkpoint stores what changed, never the whole state again, so a
  thread's storage grows with its steps, not with their square;
- ``w<ns><checkpoint id><task id><idx>``: a pending write of a node (``put_writes``).

(Parts are joined by the unit separator, which no id, namespace or channel holds.) A
checkpoint is rebuilt from its skeleton and the blobs its versions name. Values go through
the saver's ``serde`` (LangGraph's JSON-plus msgpack; it never unpickles).

Async only: a graph run by a task is awaited (``ainvoke``); the sync methods say so.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)

from deepagents.langgraph.records import ThreadRecords

SEP = "\x1f"
_NL = b"\n"


@dataclass
class _Thread:
    """One thread's records, parsed: what ``get_tuple`` and ``list`` read."""

    checkpoints: dict[str, dict[str, bytes]] = field(default_factory=dict)  # ns -> id -> raw
    blobs: dict[tuple[str, str, str], bytes] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], bytes]] = field(default_factory=dict)

    @classmethod
    def parse(cls, fields: dict[str, bytes]) -> _Thread:
        thread = cls()
        for name, value in fields.items():
            kind, *parts = name.split(SEP)
            if kind == "c" and len(parts) == 2:
                thread.checkpoints.setdefault(parts[0], {})[parts[1]] = value
            elif kind == "b" and len(parts) == 3:
                thread.blobs[(parts[0], parts[1], parts[2])] = value
            elif kind == "w" and len(parts) == 4:
                inner = thread.writes.setdefault((parts[0], parts[1]), {})
                inner[(parts[2], int(parts[3]))] = value
        return thread


class StepSaver(BaseCheckpointSaver[str]):
    """A checkpoint saver on ``records`` (the running task's, or a ``ThreadStore``)."""

    def __init__(self, records: ThreadRecords, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.records = records

    # writing -------------------------------------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        values = checkpoint["channel_values"]
        skeleton = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        record = {
            "checkpoint": skeleton,
            "metadata": get_serializable_checkpoint_metadata(config, metadata),
            "parent": conf.get("checkpoint_id"),
        }
        fields = [(_name("c", ns, checkpoint["id"]), self._typed(record))]
        for channel, version in new_versions.items():
            blob = self._typed(values[channel]) if channel in values else b"empty\n"
            fields.append((_name("b", ns, channel, str(version)), blob))
        await self.records.save(thread_id, fields)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        checkpoint_id = str(conf["checkpoint_id"])
        regular = all(channel not in WRITES_IDX_MAP for channel, _ in writes)
        # A node's regular writes are kept as first recorded (a re-run node's are the same
        # writes again); the special ones (error, interrupt, resume) are replaced.
        existing = await self.records.load(thread_id) if regular else {}
        fields = []
        for idx, (channel, value) in enumerate(writes):
            slot = WRITES_IDX_MAP.get(channel, idx)
            name = _name("w", ns, checkpoint_id, task_id, str(slot))
            if slot >= 0 and name in existing:
                continue
            type_, data = self.serde.dumps_typed(value)
            head = orjson.dumps([task_path, channel, type_])
            fields.append((name, head + _NL + data))
        if fields:
            await self.records.save(thread_id, fields)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.records.delete(str(thread_id))

    def get_next_version(self, current: str | None, channel: None) -> str:
        # Monotonic per channel; the random tail keeps a fork's blobs apart from the
        # original branch's (they may share a version number).
        n = 0 if current is None else int(str(current).split(".")[0])
        return f"{n + 1:012}.{random.getrandbits(32):08x}"

    # reading -------------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        thread = _Thread.parse(await self.records.load(thread_id))
        by_id = thread.checkpoints.get(ns, {})
        checkpoint_id = get_checkpoint_id(config) or (max(by_id) if by_id else None)
        if checkpoint_id is None or checkpoint_id not in by_id:
            return None
        return self._tuple(thread, thread_id, ns, checkpoint_id)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        conf = config["configurable"] if config else {}
        if "thread_id" in conf:
            threads = [str(conf["thread_id"])]
        else:
            threads = await self.records.threads()
        only_ns = conf.get("checkpoint_ns")
        only_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        left = limit
        for thread_id in threads:
            thread = _Thread.parse(await self.records.load(thread_id))
            for ns, by_id in thread.checkpoints.items():
                if only_ns is not None and ns != only_ns:
                    continue
                for checkpoint_id in sorted(by_id, reverse=True):
                    if only_id is not None and checkpoint_id != only_id:
                        continue
                    if before_id is not None and checkpoint_id >= before_id:
                        continue
                    found = self._tuple(thread, thread_id, ns, checkpoint_id)
                    if filter and any(found.metadata.get(k) != v for k, v in filter.items()):
                        continue
                    if left is not None:
                        if left <= 0:
                            return
                        left -= 1
                    yield found

    def _tuple(
        self, thread: _Thread, thread_id: str, ns: str, checkpoint_id: str
    ) -> CheckpointTuple:
        record = self._untyped(thread.checkpoints[ns][checkpoint_id])
        skeleton = record["checkpoint"]
        values: dict[str, Any] = {}
        for channel, version in skeleton["channel_versions"].items():
            blob = thread.blobs.get((ns, channel, str(version)))
            if blob is not None and not blob.startswith(b"empty\n"):
                values[channel] = self._untyped(blob)
        checkpoint: Checkpoint = {**skeleton, "channel_values": values}  # type: ignore[typeddict-item]
        writes = []
        for (task_id, idx), raw in thread.writes.get((ns, checkpoint_id), {}).items():
            head, _, data = raw.partition(_NL)
            task_path, channel, type_ = orjson.loads(head)
            value = self.serde.loads_typed((type_, data))
            writes.append(((task_path, task_id, idx), (task_id, channel, value)))
        writes.sort(key=lambda item: item[0])
        parent = record.get("parent")
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            },
            checkpoint=checkpoint,
            metadata=record["metadata"],
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=[write for _, write in writes],
        )

    def _typed(self, value: Any) -> bytes:
        type_, data = self.serde.dumps_typed(value)
        return type_.encode() + _NL + data

    def _untyped(self, raw: bytes) -> Any:
        type_, _, data = raw.partition(_NL)
        return self.serde.loads_typed((type_.decode(), data))

    # the sync API ----------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        raise _async_only()

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        raise _async_only()

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        raise _async_only()

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        raise _async_only()

    def delete_thread(self, thread_id: str) -> None:
        raise _async_only()


def _name(kind: str, *parts: str) -> str:
    return SEP.join((kind, *parts))


def _async_only() -> NotImplementedError:
    return NotImplementedError(
        "StepSaver is async: run the graph with ainvoke / astream (a task's graph is)"
    )
