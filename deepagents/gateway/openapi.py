"""The command that writes the committed copy of the OpenAPI document (``apidoc.py``).

python -m deepagents.gateway.openapi docs/openapi.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
from fastapi import FastAPI

from deepagents.config.schema import FileConfig
from deepagents.config.settings import Settings
from deepagents.gateway.app import create_app


def render(app: FastAPI) -> bytes:
    return orjson.dumps(app.openapi(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def offline_app() -> FastAPI:
    """An app built with defaults only (no Redis needed: nothing runs the lifespan)."""
    return create_app(Settings(), FileConfig())


def main(argv: list[str]) -> int:
    data = render(offline_app())
    if argv:
        Path(argv[0]).write_bytes(data)
    else:
        sys.stdout.buffer.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
