"""The live placement policy: the settings' policy, or the one a ConfigMap holds instead.

The admin API's PUT /policy writes the policy into a ConfigMap (`policy.yaml`: a preset and
weight overrides); every process that decides or explains placements (the scheduler, the
admin API's what-if) watches it and uses it from its next decision on, and a restarted process
reads it again, so the choice survives restarts. The document is parsed by a function the
composition root hands in (it knows the settings the document overrides); one that does not
parse leaves the settings' policy in force and says why (`LivePolicy.error`). Deleting the
ConfigMap goes back to the settings' policy.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes import client

from gpufleet.core.policy import Policy
from gpufleet.scheduler.informer import Informer

log = logging.getLogger("gpufleet.scheduler.policy")

POLICY_KEY = "policy.yaml"
# The parsed document -> (preset name, policy); raises ValueError when it is not valid.
Parse = Callable[[Mapping[str, Any]], tuple[str, Policy]]


@dataclass(frozen=True, slots=True)
class LivePolicy:
    """The policy in force, where it came from, and why a stored one was not taken."""

    name: str  # the preset
    policy: Policy
    source: str = "settings"  # or "configmap"
    version: str | None = None  # the ConfigMap's resourceVersion, when it is the source
    document: Mapping[str, Any] | None = None  # what the ConfigMap holds, parsed or not
    error: str | None = None


class PolicyWatch:
    """Keeps `current()` equal to the ConfigMap's policy, else the settings' (`base`)."""

    def __init__(
        self,
        base: LivePolicy,
        parse: Parse,
        namespace: str,
        name: str,
    ) -> None:
        self.base = base
        self.parse = parse
        self.namespace = namespace
        self.name = name
        self._listeners: list[Callable[[LivePolicy], None]] = []
        self._lock = threading.Lock()
        self._current = base

    def on_change(self, listener: Callable[[LivePolicy], None]) -> None:
        """Call `listener(policy)` whenever the policy in force changes."""
        with self._lock:
            self._listeners.append(listener)

    def current(self) -> LivePolicy:
        with self._lock:
            return self._current

    def informer(self, core: client.CoreV1Api, stop: threading.Event) -> Informer:
        return Informer(
            f"policy-{self.name}",
            functools.partial(core.list_namespaced_config_map, self.namespace),
            self.replace,
            self.event,
            stop,
            field_selector=f"metadata.name={self.name}",
        )

    def replace(self, items: list[dict[str, Any]]) -> None:
        self._set(self.read(items[0]) if items else self.base)

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        self._set(self.base if kind == "DELETED" else self.read(obj))

    def read(self, obj: Mapping[str, Any]) -> LivePolicy:
        """The policy a ConfigMap object holds; the base one (with the error) if it is bad."""
        version = str((obj.get("metadata") or {}).get("resourceVersion", "")) or None
        text = (obj.get("data") or {}).get(POLICY_KEY, "")
        try:
            document = yaml.safe_load(text) or {}
            if not isinstance(document, dict):
                raise ValueError(f"{POLICY_KEY} must hold a mapping")
            name, policy = self.parse(document)
        except (yaml.YAMLError, ValueError) as exc:
            error = f"ConfigMap {self.namespace}/{self.name}: {exc}"
            log.error("%s; keeping the %s policy of the settings", error, self.base.name)
            return LivePolicy(self.base.name, self.base.policy, "settings", version, None, error)
        return LivePolicy(name, policy, "configmap", version, document)

    def _set(self, live: LivePolicy) -> None:
        with self._lock:
            changed = live != self._current
            self._current = live
            listeners = list(self._listeners)
        if changed:
            log.info("placement policy now %s (from the %s)", live.name, live.source)
            for listener in listeners:
                listener(live)
