"""Authentication, authorization, limits and audit, with the review adapter faked:

- 401 without a token, with a non-bearer scheme, with a token the reviewer rejects (with a
  Bearer challenge); 403 naming the missing permission; checked before the body is validated;
- answers of the reviewer are reused within the TTL (positive and negative), fetched again after;
- the per-user token bucket: 429 with Retry-After past the burst, per user, refilled over time;
- request bodies over the limit: 413 on the declared length and on a chunked body;
- one audit line per call of a mutating route, with user, groups, route and outcome; none for
  reads; an unreachable API server is a 503 problem, never a 500.
"""

from __future__ import annotations

import json
import logging

import pytest
from admin_fakes import (
    ADMIN,
    FakeReviewer,
    admin_grants,
    auth,
    context,
    live_fleet,
    sandbox_nodes,
    served,
)

from gpufleet.admin.auth import Access, CachedReviewer, RateLimiter, User
from gpufleet.settings import AdminSettings


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _ctx(reviewer: FakeReviewer | None = None, **settings: object):  # type: ignore[no-untyped-def]
    return context(
        live_fleet(sandbox_nodes(), [], []),
        reviewer or FakeReviewer(admin_grants()),
        AdminSettings(**settings),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        pytest.param({}, 401, id="no-token"),
        pytest.param({"Authorization": "Basic YWRtaW46eA=="}, 401, id="basic-scheme"),
        pytest.param({"Authorization": "Bearer"}, 401, id="empty-token"),
        pytest.param(auth("forged"), 401, id="rejected-token"),
        pytest.param(auth("viewer-token"), 403, id="no-permission"),
        pytest.param(auth("admin-token"), 200, id="allowed"),
    ],
)
def test_authentication_then_authorization(headers: dict[str, str], status: int) -> None:
    with served(_ctx()) as http:
        response = http.get("/api/v1/fleet", headers=headers)
    assert response.status_code == status
    if status >= 400:
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["status"] == status
    if status == 401:
        assert response.headers["www-authenticate"].startswith("Bearer")
    if status == 403:
        assert response.json()["detail"] == (
            "viewer may not list nodes (cluster-wide): no RBAC rule allows it"
        )


def test_permission_is_checked_before_the_request_is_validated() -> None:
    with served(_ctx()) as http:
        # An invalid limit from a user without the permission: 403, not 422.
        assert http.get("/api/v1/fleet?limit=0", headers=auth("viewer-token")).status_code == 403
        assert http.get("/api/v1/fleet?limit=0", headers=auth()).status_code == 422


def test_review_answers_are_reused_within_the_ttl() -> None:
    clock = Clock()
    inner = FakeReviewer(admin_grants())
    cached = CachedReviewer(inner, ttl_s=10, clock=clock)
    for _ in range(3):
        assert cached.authenticate("admin-token") == ADMIN
        assert cached.authenticate("forged") is None
        assert cached.authorize(ADMIN, Access("list", "nodes")) == (True, "")
    assert inner.authentications == 2 and len(inner.authorizations) == 1
    clock.now += 10.5
    cached.authenticate("admin-token")
    cached.authorize(ADMIN, Access("list", "nodes"))
    assert inner.authentications == 3 and len(inner.authorizations) == 2
    # Another user, or other attributes, are other questions.
    cached.authorize(User("other"), Access("list", "nodes"))
    cached.authorize(ADMIN, Access("list", "nodes", namespace="a"))
    assert len(inner.authorizations) == 4


def test_rate_limit_per_user() -> None:
    clock = Clock()
    limiter = RateLimiter(rate_per_s=0.5, burst=2, clock=clock)
    assert [limiter.take("a"), limiter.take("a")] == [0.0, 0.0]
    assert limiter.take("a") == pytest.approx(2.0)
    assert limiter.take("b") == 0.0  # each user has a bucket
    clock.now += 2.0
    assert limiter.take("a") == 0.0

    ctx = _ctx()
    ctx.limiter = RateLimiter(rate_per_s=0.01, burst=2)
    with served(ctx) as http:
        codes = [http.get("/api/v1/fleet", headers=auth()).status_code for _ in range(3)]
        limited = http.get("/api/v1/fleet", headers=auth())
    assert codes == [200, 200, 429]
    assert limited.headers["content-type"] == "application/problem+json"
    assert int(limited.headers["retry-after"]) >= 1


def test_body_size_limit() -> None:
    with served(_ctx(max_body_bytes=2048)) as http:
        big = json.dumps({"kind": "TrainingJob", "pad": "x" * 4000})
        declared = http.post(
            "/api/v1/whatif",
            headers=auth() | {"content-type": "application/json"},
            content=big,
        )

        def chunks():  # type: ignore[no-untyped-def]
            for _ in range(8):
                yield b"x" * 1000

        chunked = http.post(
            "/api/v1/whatif",
            headers=auth() | {"content-type": "application/json"},
            content=chunks(),
        )
    for response in (declared, chunked):
        assert response.status_code == 413
        assert response.headers["content-type"] == "application/problem+json"
        assert "larger than 2048 bytes" in response.json()["detail"]


def test_audit_line_per_mutating_call(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpufleet.admin.audit")
    with served(_ctx()) as http:
        http.get("/api/v1/fleet", headers=auth())  # a read: no audit line
        denied = http.post("/api/v1/nodes/h100-0/cordon", headers=auth("viewer-token"))
        # Allowed, but the fake cluster's API server cannot be reached: a 503 problem.
        failed = http.post("/api/v1/nodes/h100-0/cordon", headers=auth())
        anonymous = http.post("/api/v1/nodes/h100-0/cordon")
    assert (denied.status_code, failed.status_code, anonymous.status_code) == (403, 503, 401)
    assert "cannot reach the Kubernetes API" in failed.json()["detail"]
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gpufleet.admin.audit"]
    assert [(x["user"], x["status"], x["outcome"]) for x in lines] == [
        ("viewer", 403, "denied"),
        ("admin", 503, "failed"),
        (None, 401, "denied"),
    ]
    assert lines[1]["groups"] == ["system:authenticated"]
    assert lines[1]["route"] == "/api/v1/nodes/{name}/cordon"
    assert lines[1]["path"] == "/api/v1/nodes/h100-0/cordon"
