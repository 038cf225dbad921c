"""The OpenAPI document, and the command that writes the committed copy.

Bodies are parsed by the gateway itself (size cap and strict JSON before pydantic), so
FastAPI does not see them as parameters; their schemas are added here.

    python -m deepagents.gateway.openapi docs/openapi.json
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

from deepagents.gateway.problems import ProblemDocument
from deepagents.gateway.schemas import BatchRequest, SubmitRequest

_REF = "#/components/schemas/{model}"


def build_openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    _, extra = models_json_schema(
        [
            (SubmitRequest, "validation"),
            (BatchRequest, "validation"),
            (ProblemDocument, "serialization"),
        ],
        ref_template=_REF,
    )
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(extra.get("$defs", {}))
    app.openapi_schema = doc
    return doc


def render(app: FastAPI) -> bytes:
    return orjson.dumps(app.openapi(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def offline_app() -> FastAPI:
    """An app built with defaults only (no Redis needed: nothing runs the lifespan)."""
    from deepagents.config.schema import FileConfig
    from deepagents.config.settings import Settings
    from deepagents.gateway.app import create_app

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
