"""Example agents shipped with deepagents."""
