"""The API's published contract:

- OpenAPI 3.1 at /openapi.json; every schema property, parameter and request body described;
- operation ids `<tag>-<name>`, unique; error responses only as application/problem+json, and
  every route documents 401/403 when it authenticates;
- errors are RFC 9457 problems: an unknown path (404), a wrong method (405), invalid input
  (422 with `errors`, also for a query parameter given twice), and a bug (500, logged with its
  traceback, no internals in the body).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from admin_fakes import auth, context, live_fleet, sandbox_nodes, served

from gpufleet.admin.main import create_app
from gpufleet.admin.server import AdminServer


def _doc() -> dict[str, Any]:
    return create_app(context(live_fleet([], [], []))).openapi()


def _undescribed(schema: Any, where: str) -> list[str]:
    out: list[str] = []
    if isinstance(schema, dict):
        for name, prop in (schema.get("properties") or {}).items():
            if not prop.get("description"):
                out.append(f"{where}.{name}")
            out += _undescribed(prop, f"{where}.{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(schema.get(key), dict):
                out += _undescribed(schema[key], where)
        for key in ("anyOf", "oneOf", "allOf"):
            for part in schema.get(key) or ():
                out += _undescribed(part, where)
    return out


def test_openapi_is_3_1_with_every_field_described() -> None:
    doc = _doc()
    assert doc["openapi"].startswith("3.1")
    missing = [m for name, s in doc["components"]["schemas"].items() for m in _undescribed(s, name)]
    assert missing == []
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            assert op.get("description") or op.get("summary"), (method, path)
            for param in op.get("parameters", []):
                assert param.get("description"), (method, path, param["name"])
            if "requestBody" in op:
                assert op["requestBody"].get("description"), (method, path)


def test_operation_ids_and_error_media_types() -> None:
    doc = _doc()
    ids = []
    for path, operations in doc["paths"].items():
        for op in operations.values():
            ids.append(op["operationId"])
            assert re.fullmatch(r"[a-z]+-[a-z_]+", op["operationId"])
            for status, response in op["responses"].items():
                if status[0] in "45":
                    assert list(response["content"]) == ["application/problem+json"], path
            if path.startswith("/api/v1/"):
                assert {"401", "403", "429"} <= set(op["responses"]), path
    assert len(ids) == len(set(ids))
    expected = {"fleet-get", "jobs-list", "jobs-get", "queues-list", "queues-get"}
    assert expected | {"whatif-evaluate", "nodes-drain"} <= set(ids)


def test_served_document_and_problem_shapes() -> None:
    with served(context(live_fleet(sandbox_nodes(), [], []))) as http:
        assert http.get("/openapi.json").json()["info"]["title"] == "gpufleet admin API"
        missing = http.get("/api/v1/nothing-here", headers=auth())
        wrong_method = http.delete("/api/v1/fleet", headers=auth())
        invalid = http.get("/api/v1/fleet", headers=auth(), params={"limit": "many"})
    assert missing.status_code == 404 and wrong_method.status_code == 405
    for response in (missing, wrong_method, invalid):
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        assert problem["status"] == response.status_code and problem["title"]
        assert problem["instance"] == response.request.url.path
    body = invalid.json()
    assert invalid.status_code == 422 and body["type"] == "urn:gpufleet:problem:validation-error"
    assert body["errors"][0]["loc"] == ["query", "limit"]


def test_a_repeated_query_parameter_is_a_422_naming_it() -> None:
    # FastAPI keeps the last value of `?queue=a&queue=b`; a filter silently narrowed to one of
    # two values is a wrong answer, so the API refuses it.
    with served(context(live_fleet(sandbox_nodes(), [], []))) as http:
        repeated = http.get("/api/v1/jobs?queue=a&queue=b&phase=Queued", headers=auth())
        once = http.get("/api/v1/jobs?queue=a&phase=Queued", headers=auth())
    assert repeated.status_code == 422, repeated.text
    body = repeated.json()
    assert body["errors"] == [
        {
            "loc": ["query", "queue"],
            "msg": "given more than once; it takes one value",
            "type": "repeated",
        }
    ]
    assert body["detail"].startswith("query.queue: given more than once")
    assert once.status_code == 200 and once.json()["items"] == []


def test_a_bug_is_a_logged_500_problem(caplog: pytest.LogCaptureFixture) -> None:
    ctx = context(live_fleet([], [], []))
    ctx.settings = ctx.settings.model_copy(update={"port": 0})
    app = create_app(ctx)

    @app.get("/api/v1/broken")
    def broken() -> None:
        raise RuntimeError("secret internals")

    import httpx

    with AdminServer(ctx, app) as server, httpx.Client() as http:
        response = http.get(f"http://127.0.0.1:{server.port}/api/v1/broken")
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert "secret" not in response.text
    logged = [r for r in caplog.records if r.levelno == logging.ERROR and r.exc_info]
    assert logged and "secret internals" in str(logged[0].exc_info[1])
