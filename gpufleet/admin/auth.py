"""Authentication and authorization through the Kubernetes API server, and per-user limits.

A bearer token is checked with a TokenReview (`authentication.k8s.io/v1`) and each request's
permission with a SubjectAccessReview (`authorization.k8s.io/v1`) for the resource attributes
its route maps to, as kube-rbac-proxy and aggregated API servers do: cluster RBAC decides. Both
answers are kept for a short TTL (keyed by the token's SHA-256, never the token) so a burst of
requests costs one review. An API server that cannot be reached is a 503, never a 500 and never
an access granted. A token bucket per user bounds request rates (429 with Retry-After).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpufleet.admin.errors import ProblemError

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class User:
    """An authenticated user, as the TokenReview reports it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Access:
    """What a request does, as SubjectAccessReview attributes: a verb on a resource (with
    group, namespace, name, subresource) or, with `path`, a verb on a non-resource URL."""

    verb: str
    resource: str = ""
    group: str = ""
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    path: str = ""

    def describe(self) -> str:
        if self.path:
            return f"{self.verb} {self.path}"
        what = f"{self.resource}.{self.group}" if self.group else self.resource
        if self.subresource:
            what += f"/{self.subresource}"
        if self.name:
            what += f" {self.name}"
        where = f" in namespace {self.namespace}" if self.namespace else " (cluster-wide)"
        return f"{self.verb} {what}{where}"


class Reviewer(Protocol):
    """Who a token is, and whether a user may do something."""

    def authenticate(self, token: str) -> User | None: ...

    def authorize(self, user: User, access: Access) -> tuple[bool, str]: ...


class ReviewUnavailable(ProblemError):
    """The API server did not answer a review."""

    def __init__(self, what: str, cause: object) -> None:
        super().__init__(503, f"cannot reach the Kubernetes API for {what}: {cause}")


class KubeReviewer:
    """TokenReview and SubjectAccessReview against the API server (the caller's identity needs
    `create` on both)."""

    def __init__(self, api: client.ApiClient) -> None:
        self._authn = client.AuthenticationV1Api(api)
        self._authz = client.AuthorizationV1Api(api)

    def authenticate(self, token: str) -> User | None:
        body: Any = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        try:
            raw: Any = self._authn.create_token_review(body, _preload_content=False)
        except (ApiException, HTTPError, OSError) as exc:
            raise ReviewUnavailable("a TokenReview", _cause(exc)) from exc
        status = json.loads(raw.data).get("status") or {}
        if not status.get("authenticated"):
            return None
        user = status.get("user") or {}
        return User(
            username=str(user.get("username", "")),
            uid=str(user.get("uid", "")),
            groups=tuple(str(g) for g in user.get("groups") or ()),
        )

    def authorize(self, user: User, access: Access) -> tuple[bool, str]:
        spec: dict[str, Any] = {"user": user.username, "groups": list(user.groups)}
        if user.uid:
            spec["uid"] = user.uid
        if access.path:
            spec["nonResourceAttributes"] = {"path": access.path, "verb": access.verb}
        else:
            attrs = {
                "verb": access.verb,
                "group": access.group,
                "resource": access.resource,
                "namespace": access.namespace,
                "name": access.name,
                "subresource": access.subresource,
            }
            spec["resourceAttributes"] = {k: v for k, v in attrs.items() if v}
        body: Any = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        try:
            raw: Any = self._authz.create_subject_access_review(body, _preload_content=False)
        except (ApiException, HTTPError, OSError) as exc:
            raise ReviewUnavailable("a SubjectAccessReview", _cause(exc)) from exc
        status = json.loads(raw.data).get("status") or {}
        return bool(status.get("allowed")) and not status.get("denied"), str(
            status.get("reason") or ""
        )


def _cause(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    return str(exc)


class TtlCache:
    """A small thread-safe map whose entries expire; the oldest go first when it is full."""

    def __init__(self, ttl_s: float, size: int = 4096, clock: Callable[[], float] = time.monotonic):
        self.ttl_s = ttl_s
        self.size = size
        self._clock = clock
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()

    def get_or(self, key: Hashable, compute: Callable[[], V]) -> V:
        now = self._clock()
        with self._lock:
            hit = self._items.get(key)
            if hit is not None and hit[0] > now:
                value: V = hit[1]
                return value
        value = compute()  # outside the lock: a review is a network call
        if self.ttl_s > 0:
            with self._lock:
                self._items[key] = (now + self.ttl_s, value)
                self._items.move_to_end(key)
                while len(self._items) > self.size:
                    self._items.popitem(last=False)
        return value


class CachedReviewer:
    """A `Reviewer` whose answers (including "no") are reused for `ttl_s` seconds."""

    def __init__(self, inner: Reviewer, ttl_s: float, clock: Callable[[], float] = time.monotonic):
        self.inner = inner
        self._tokens = TtlCache(ttl_s, clock=clock)
        self._access = TtlCache(ttl_s, size=16384, clock=clock)

    def authenticate(self, token: str) -> User | None:
        digest = hashlib.sha256(token.encode()).hexdigest()
        return self._tokens.get_or(digest, lambda: self.inner.authenticate(token))

    def authorize(self, user: User, access: Access) -> tuple[bool, str]:
        return self._access.get_or((user, access), lambda: self.inner.authorize(user, access))


class RateLimiter:
    """A token bucket per user: `burst` requests at once, refilled at `rate_per_s`."""

    def __init__(
        self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate_per_s
        self.burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # user -> (tokens, at)

    def take(self, user: str) -> float:
        """0 when the request may go; else seconds until it may."""
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(user, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[user] = (tokens - 1.0, now)
                return 0.0
            self._buckets[user] = (tokens, now)
            return (1.0 - tokens) / self.rate


def check_rate(limiter: RateLimiter, user: User) -> None:
    wait = limiter.take(user.username)
    if wait > 0:
        raise ProblemError(
            429,
            f"too many requests from {user.username}; retry in {wait:.1f}s",
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
        )


def check_access(reviewer: Reviewer, user: User, access: Access) -> None:
    allowed, reason = reviewer.authorize(user, access)
    if not allowed:
        why = f": {reason}" if reason else ""
        raise ProblemError(403, f"{user.username} may not {access.describe()}{why}")
