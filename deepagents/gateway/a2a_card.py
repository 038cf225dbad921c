"""The A2A agent card of one agent type (docs/gateway.md, "A2A"): its intents as skills,
the JSON-RPC interface at ``/a2a/{agent}``, bearer API keys as the security scheme.

Built through the SDK's ``AgentCard`` type, so its JSON is the protocol's own form.
"""

from __future__ import annotations

from typing import Any

from a2a.types import a2a_pb2 as a2a
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol
from google.protobuf.json_format import MessageToDict

from deepagents import __version__
from deepagents.orchestrator.routing import AgentSpec, internal

SCHEME = "apiKey"
MODES = ["application/json", "text/plain"]


def rpc_path(agent: str) -> str:
    return f"/a2a/{agent}"


def card_document(spec: AgentSpec, base_url: str, *, streaming: bool) -> dict[str, Any]:
    """The card's JSON. ``streaming``: the deployment records task events (the outbox), so
    ``SubscribeToTask`` and ``SendStreamingMessage`` can follow a task."""
    intents = [i for i in spec.intents if not internal(i)]
    card = a2a.AgentCard(
        name=spec.name,
        description=f"deepagents agent type {spec.name!r}: intents {', '.join(intents)}",
        version=__version__,
        supported_interfaces=[
            a2a.AgentInterface(
                url=base_url.rstrip("/") + rpc_path(spec.name),
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_CURRENT,
            )
        ],
        capabilities=a2a.AgentCapabilities(streaming=streaming, push_notifications=False),
        security_schemes={
            SCHEME: a2a.SecurityScheme(
                http_auth_security_scheme=a2a.HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    description="an API key issued per tenant (gateway.api_keys)",
                )
            )
        },
        security_requirements=[a2a.SecurityRequirement(schemes={SCHEME: a2a.StringList()})],
        default_input_modes=MODES,
        default_output_modes=MODES,
        skills=[
            a2a.AgentSkill(
                id=intent,
                name=intent,
                description=f"a task of intent {intent!r}: message metadata.intent names it"
                + (" (the only one: it may be left out)" if len(intents) == 1 else ""),
                tags=[spec.name],
            )
            for intent in intents
        ],
    )
    document: dict[str, Any] = MessageToDict(card)
    return document
