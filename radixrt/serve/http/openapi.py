"""The OpenAPI document at /openapi.json: request bodies described by the msgspec structs that
parse them (and SamplingParams' own fields), so schema-driven clients and fuzzers see the
real request shapes."""

from __future__ import annotations

from typing import Any

import msgspec
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from radixrt.core import SAMPLING_ALIASES, SamplingParams

_REF = "#/components/schemas/{name}"


def sampling_params_struct() -> type[msgspec.Struct]:
    """A struct with SamplingParams' fields, aliases and `prediction` (documentation only: the
    server validates sampling dicts with SamplingParams.from_dict)."""
    fields: list[tuple[str, Any, Any]] = []
    hints: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for f in msgspec.structs.fields(SamplingParams):
        kind = hints[f.name] = f.type
        if f.name == "json_schema":
            kind = str | dict[str, Any] | None  # an object is accepted and serialized
        if f.name == "stop":
            kind = str | list[str] | None
        default = f.default_factory() if f.default is msgspec.NODEFAULT else f.default
        defaults[f.name] = default
        fields.append((f.name, kind, default))
    for alias, target in SAMPLING_ALIASES.items():
        fields.append((alias, hints[target], defaults[target]))
    # A predicted output as text, tokenized into prediction_ids at the edge (with_prediction_ids)
    fields.append(("prediction", str | None, None))
    return msgspec.defstruct("SamplingParams", fields, kw_only=True, forbid_unknown_fields=True)


def install_openapi(app: FastAPI, bodies: dict[str, type]) -> None:
    """Make `app.openapi()` describe the JSON body of each path in `bodies` ("/path" for POST,
    "PATCH /path" for another method)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            sampling = sampling_params_struct()
            schemas, components = msgspec.json.schema_components(
                [*bodies.values(), sampling], ref_template=_REF
            )
            _type_sampling_params(components, _REF.format(name="SamplingParams"))
            doc.setdefault("components", {}).setdefault("schemas", {}).update(components)
            for key, schema in zip(bodies, schemas, strict=False):
                method, _, path = key.rpartition(" ")
                doc["paths"][path][method.lower() or "post"]["requestBody"] = {
                    "required": True,
                    "content": {"application/json": {"schema": schema}},
                }
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _type_sampling_params(components: dict[str, Any], ref: str) -> None:
    """Point each body's untyped `sampling_params` at the SamplingParams schema."""
    one = {"$ref": ref}
    for schema in components.values():
        props = schema.get("properties", {})
        if "sampling_params" in props:
            props["sampling_params"] = {
                "anyOf": [one, {"type": "array", "items": one}, {"type": "null"}]
            }
