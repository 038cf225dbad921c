"""The gateway's OpenAPI document.

Bodies are parsed by the gateway itself (size cap and strict JSON before pydantic), so
FastAPI does not see them as parameters; their schemas are added here.
"""

from __future__ import annotations

from typing import Any

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
