"""kopf's configuration in a `gpufleet operator` process: storage, posting, credentials."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterator
from typing import Any

import kopf
from kubernetes import client

from gpufleet.scheduler.apiwriter import bearer_token


class EndlessBackoffs:
    """kopf's back-offs between attempts of an API request: 1, 2 and 5 s, then every 10 s for
    as long as it takes.

    kopf gives up on a request once its back-offs run out, and a watch request that gives up
    ends the watcher of that resource for good: kopf does not start it again, so the handlers of
    that kind never run again in this process. Seen when a restarted API server answers 503
    ("the request has been made before all known HTTP paths have been installed") for a few
    seconds. Not `Sized`, so kopf counts no last attempt; iterable afresh for every request,
    since one settings object serves them all."""

    def __iter__(self) -> Iterator[float]:
        return itertools.chain((1.0, 2.0, 5.0), itertools.repeat(10.0))


@kopf.on.startup()
def _configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Progress and diff-base in annotations: the CRD's status schema is gpufleet's own.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="gpufleet.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="gpufleet.io", key="last-handled-configuration"
    )
    settings.persistence.finalizer = "gpufleet.io/finalizer"
    # Handlers post their own Events on transitions; kopf's routine INFO logs stay logs.
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 16
    settings.watching.server_timeout = 300
    settings.networking.error_backoffs = EndlessBackoffs()
    # A job deleted while its timer's pass runs keeps kopf's finalizer until kopf sees the
    # timer stopped; kopf looks again only every `cancellation_polling` seconds (60 by
    # default), so such a deletion took a minute. A pass lasts well under a second.
    settings.background.cancellation_polling = 1.0


def register_login(api: client.ApiClient) -> Any:
    """kopf's credentials, taken from the same kubeconfig as the scheduler's client."""
    cfg = api.configuration

    @kopf.on.login()
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(
            server=cfg.host,
            ca_path=cfg.ssl_ca_cert,
            insecure=not cfg.verify_ssl,
            certificate_path=cfg.cert_file,
            private_key_path=cfg.key_file,
            token=bearer_token(cfg),
        )

    return login


def register_stop_on_cleanup(stop: threading.Event) -> Any:
    """Raise `stop`, the flag kopf is given, once kopf stops for a reason of its own.

    kopf handles SIGTERM and SIGINT itself (its handlers replace the process's) and waits on a
    `threading.Event` stop flag in an executor thread, which no cancellation can end. Stopped
    by a signal, it would wait a fixed 5 s for that waiter before returning, and every graceful
    stop (a rolling update's hand-over) took ~6 s. Its cleanup activity runs once its own tasks
    are stopped, while its handlers still in flight are given their time to finish."""

    @kopf.on.cleanup()
    async def raise_stop_flag(**_: Any) -> None:
        stop.set()

    return raise_stop_flag
