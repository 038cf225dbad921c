from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WireTask(_message.Message):
    __slots__ = ("id", "intent", "payload", "tenant")
    ID_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    id: str
    intent: str
    payload: _struct_pb2.Struct
    tenant: str
    def __init__(self, id: _Optional[str] = ..., intent: _Optional[str] = ..., payload: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tenant: _Optional[str] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("protocol", "task", "attempt", "time_left_ms", "traceparent", "idempotency_key", "json")
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TIME_LEFT_MS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    protocol: int
    task: WireTask
    attempt: int
    time_left_ms: int
    traceparent: str
    idempotency_key: str
    json: bytes
    def __init__(self, protocol: _Optional[int] = ..., task: _Optional[_Union[WireTask, _Mapping]] = ..., attempt: _Optional[int] = ..., time_left_ms: _Optional[int] = ..., traceparent: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., json: _Optional[bytes] = ...) -> None: ...

class ExecuteRequest(_message.Message):
    __slots__ = ("protocol", "task", "attempt", "time_left_ms", "traceparent", "idempotency_key", "context", "json")
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TIME_LEFT_MS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    protocol: int
    task: WireTask
    attempt: int
    time_left_ms: int
    traceparent: str
    idempotency_key: str
    context: _struct_pb2.Struct
    json: bytes
    def __init__(self, protocol: _Optional[int] = ..., task: _Optional[_Union[WireTask, _Mapping]] = ..., attempt: _Optional[int] = ..., time_left_ms: _Optional[int] = ..., traceparent: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., context: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., json: _Optional[bytes] = ...) -> None: ...

class PostProcessRequest(_message.Message):
    __slots__ = ("protocol", "task", "attempt", "time_left_ms", "traceparent", "idempotency_key", "result", "json")
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TIME_LEFT_MS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    protocol: int
    task: WireTask
    attempt: int
    time_left_ms: int
    traceparent: str
    idempotency_key: str
    result: WireResult
    json: bytes
    def __init__(self, protocol: _Optional[int] = ..., task: _Optional[_Union[WireTask, _Mapping]] = ..., attempt: _Optional[int] = ..., time_left_ms: _Optional[int] = ..., traceparent: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., result: _Optional[_Union[WireResult, _Mapping]] = ..., json: _Optional[bytes] = ...) -> None: ...

class WireError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class WireResult(_message.Message):
    __slots__ = ("status", "output", "error", "degraded", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    status: str
    output: _struct_pb2.Value
    error: WireError
    degraded: bool
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, status: _Optional[str] = ..., output: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., error: _Optional[_Union[WireError, _Mapping]] = ..., degraded: _Optional[bool] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class CanHandleResponse(_message.Message):
    __slots__ = ("can_handle", "json")
    CAN_HANDLE_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    can_handle: bool
    json: bytes
    def __init__(self, can_handle: _Optional[bool] = ..., json: _Optional[bytes] = ...) -> None: ...

class PrepareContextResponse(_message.Message):
    __slots__ = ("context", "json")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    context: _struct_pb2.Struct
    json: bytes
    def __init__(self, context: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., json: _Optional[bytes] = ...) -> None: ...

class ExecuteResponse(_message.Message):
    __slots__ = ("result", "json")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    result: WireResult
    json: bytes
    def __init__(self, result: _Optional[_Union[WireResult, _Mapping]] = ..., json: _Optional[bytes] = ...) -> None: ...

class PostProcessResponse(_message.Message):
    __slots__ = ("result", "metrics", "json")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    RESULT_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    result: WireResult
    metrics: _containers.ScalarMap[str, float]
    json: bytes
    def __init__(self, result: _Optional[_Union[WireResult, _Mapping]] = ..., metrics: _Optional[_Mapping[str, float]] = ..., json: _Optional[bytes] = ...) -> None: ...

class RunResponse(_message.Message):
    __slots__ = ("can_handle", "result", "json")
    CAN_HANDLE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    can_handle: bool
    result: WireResult
    json: bytes
    def __init__(self, can_handle: _Optional[bool] = ..., result: _Optional[_Union[WireResult, _Mapping]] = ..., json: _Optional[bytes] = ...) -> None: ...

class RunBatchRequest(_message.Message):
    __slots__ = ("protocol", "runs", "json")
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    protocol: int
    runs: _containers.RepeatedCompositeFieldContainer[StepRequest]
    json: bytes
    def __init__(self, protocol: _Optional[int] = ..., runs: _Optional[_Iterable[_Union[StepRequest, _Mapping]]] = ..., json: _Optional[bytes] = ...) -> None: ...

class RunAnswer(_message.Message):
    __slots__ = ("id", "can_handle", "result", "problem", "json")
    ID_FIELD_NUMBER: _ClassVar[int]
    CAN_HANDLE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    can_handle: bool
    result: WireResult
    problem: Problem
    json: bytes
    def __init__(self, id: _Optional[str] = ..., can_handle: _Optional[bool] = ..., result: _Optional[_Union[WireResult, _Mapping]] = ..., problem: _Optional[_Union[Problem, _Mapping]] = ..., json: _Optional[bytes] = ...) -> None: ...

class RunBatchResponse(_message.Message):
    __slots__ = ("answers",)
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.RepeatedCompositeFieldContainer[RunAnswer]
    def __init__(self, answers: _Optional[_Iterable[_Union[RunAnswer, _Mapping]]] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("status", "detail", "methods", "version", "json_bytes")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    METHODS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    JSON_BYTES_FIELD_NUMBER: _ClassVar[int]
    status: str
    detail: str
    methods: _containers.RepeatedScalarFieldContainer[str]
    version: str
    json_bytes: bool
    def __init__(self, status: _Optional[str] = ..., detail: _Optional[str] = ..., methods: _Optional[_Iterable[str]] = ..., version: _Optional[str] = ..., json_bytes: _Optional[bool] = ...) -> None: ...

class Problem(_message.Message):
    __slots__ = ("type", "title", "status", "detail")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    type: str
    title: str
    status: int
    detail: str
    def __init__(self, type: _Optional[str] = ..., title: _Optional[str] = ..., status: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...
