"""Remote agents: an agent type served over HTTP by a service in any language.

The worker keeps the whole delivery protocol; ``RemoteAgent`` only turns the contract's
calls into requests of the wire protocol (``wire.py``, ``docs/remote-agents.md``).
"""

from deepagents.remote.agent import RemoteAgent, remote_agent_class

__all__ = ["RemoteAgent", "remote_agent_class"]
