"""The HTTP gateway: upstream services in any language submit tasks and read results.

Kept import-free on purpose: ``deepagents.config.schema`` imports the gateway's config
model, so importing this package must not pull in the app (and the orchestrator).
Build the app with ``deepagents.gateway.app.create_app``.
"""
