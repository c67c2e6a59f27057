"""Property-based check of the whole API against its own OpenAPI document (schemathesis), with
a valid token of a ServiceAccount allowed every route, on the sandbox: generated requests, valid
and invalid, get no response >= 500, and every response matches the documented status codes,
media types and schemas. Bounded: a few dozen examples per operation."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

import pytest
import requests
import schemathesis
from admin_helpers import ADMIN_RULES, AdminApi, accounts, wait_settled
from hypothesis import HealthCheck, given, settings
from kubernetes.client.exceptions import ApiException
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig

from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.settings import POLICY_CONFIGMAP, SYSTEM_NAMESPACE
from gpufleet.testing.operator import Kube, training_job

EXAMPLES_PER_OPERATION = 20


@pytest.fixture(scope="module")
def admin(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[AdminApi, str]]:
    ns = f"admin-fuzz-{uuid.uuid4().hex[:6]}"
    kube.create_namespace(ns)
    kube.create_job(ns, training_job("fuzzed", 1, 1, "T4"))
    # No rate limit to speak of: the fuzzer is one user sending many requests.
    state = tmp_path_factory.mktemp("admin")
    with (
        accounts(kube, ns) as made,
        AdminApi(sandbox, state, rate_limit_per_s=10_000, rate_limit_burst=10_000) as api,
    ):
        token = made.create("fuzzer", ADMIN_RULES)
        wait_settled(1.0)
        yield api, token
    kube.clean_namespace(ns)
    # Should a generated PUT /policy have matched the ETag, later modules get the settings back.
    with contextlib.suppress(ApiException):
        kube.core.delete_namespaced_config_map(POLICY_CONFIGMAP, SYSTEM_NAMESPACE)


@pytest.mark.parametrize("mode", list(GenerationMode), ids=lambda m: m.value)
def test_no_server_error_and_responses_match_the_schema(
    admin: tuple[AdminApi, str], mode: GenerationMode
) -> None:
    api, token = admin
    # The checks send requests of their own (e.g. without the token): they trust the API's
    # self-signed certificate through the config, as the calls below do.
    config = SchemathesisConfig.from_dict({"tls-verify": str(api.cert)})
    schema = schemathesis.openapi.from_dict(api.get("/openapi.json").json(), config=config)
    session = requests.Session()
    headers = {"Authorization": f"Bearer {token}"}
    checked: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        inputs = operation.query or operation.path_parameters or operation.body
        if mode is GenerationMode.NEGATIVE and not inputs:
            continue  # no input to make invalid (the probes)

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def run(case: schemathesis.Case) -> None:
            response = case.call(
                base_url=api.url, session=session, headers=headers, verify=str(api.cert)
            )
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path}: {response.text}"
            )
            # Valid-looking input may still name a node or job that does not exist (404) or
            # a layout the node cannot take (422): positive-data acceptance is not asserted;
            # every other check of the schema is.
            case.validate_response(
                response, excluded_checks=[schemathesis.checks.positive_data_acceptance]
            )

        started = time.monotonic()
        run()
        checked.append(operation.label)
        print(f"schemathesis {mode.value} {operation.label}: {time.monotonic() - started:.1f}s")
    # Every operation (15), and in negative mode those with an input to make invalid (11).
    assert len(checked) == (15 if mode is GenerationMode.POSITIVE else 11), checked
