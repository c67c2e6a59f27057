"""The Lease fence of the operator's handlers: while this replica's Lease is not renewed, every
TrainingJob and ServingJob pass (create, timer, delete) is retried later instead of acting."""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from kubernetes import client

from gpufleet.autoscaler.service import JobAutoscalers
from gpufleet.core.autoscaling_settings import AutoscalerSettings
from gpufleet.operator import servingjob_handlers as servingjob
from gpufleet.operator import trainingjob_handlers as trainingjob
from gpufleet.scheduler.cache import SchedulerCache


class Unreachable(client.ApiClient):
    """Fails the test on any request: a fenced handler must not reach the API."""

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a fenced handler called the API")


def _memo(leading: bool) -> kopf.Memo:
    api = Unreachable()
    return kopf.Memo(
        state=trainingjob.State(api, SchedulerCache(), may_act=lambda: leading),
        serving=servingjob.State(
            api, JobAutoscalers(AutoscalerSettings()), may_act=lambda: leading
        ),
    )


JOB = {"metadata": {"name": "j", "namespace": "ns", "uid": "u1"}, "spec": {}}


@pytest.mark.parametrize(
    "handler",
    [
        lambda memo: trainingjob.reconcile_job(body=JOB, memo=memo, patch=kopf.Patch()),
        lambda memo: trainingjob.follow_pods(body=JOB, memo=memo, patch=kopf.Patch()),
        lambda memo: trainingjob.delete_children(namespace="ns", name="j", uid="u1", memo=memo),
        lambda memo: servingjob.reconcile_servingjob(body=JOB, memo=memo, patch=kopf.Patch()),
        lambda memo: servingjob.follow_servingjob(body=JOB, memo=memo, patch=kopf.Patch()),
    ],
    ids=["tj-create", "tj-timer", "tj-delete", "sj-create", "sj-timer"],
)
def test_a_pass_without_the_lease_is_retried_not_acted_on(handler: Any) -> None:
    with pytest.raises(kopf.TemporaryError, match="Lease was not renewed"):
        handler(_memo(leading=False))
