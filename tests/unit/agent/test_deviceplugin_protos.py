"""The vendored device-plugin proto and the stubs generated from it.

Aspects: the proto below gpufleet's header is byte-for-byte the kubelet module's file (its
recorded SHA-256), the committed stubs equal a fresh generation, the message and service names
are the kubelet's (`v1beta1.Registration/Register`, `v1beta1.DevicePlugin/...`), and an
edited or header-less proto is refused.
"""

from __future__ import annotations

from gpufleet.agent.deviceplugin import protogen
from gpufleet.agent.deviceplugin.v1beta1 import api_pb2


def test_vendored_proto_is_the_upstream_file() -> None:
    text = protogen.PROTO.read_text()
    assert "Apache License, Version 2.0" in text.split(protogen.upstream_body(text))[0]
    assert protogen.body_digest(text) == protogen.recorded_digest(text)


def test_committed_stubs_match_the_proto() -> None:
    assert protogen.drifted() == []
    assert protogen.main(["--check"]) == 0


def test_services_have_the_kubelets_names() -> None:
    services = api_pb2.DESCRIPTOR.services_by_name
    assert services["Registration"].full_name == "v1beta1.Registration"
    assert [m.name for m in services["DevicePlugin"].methods] == [
        "GetDevicePluginOptions",
        "ListAndWatch",
        "GetPreferredAllocation",
        "Allocate",
        "PreStartContainer",
    ]


def test_edited_proto_is_refused() -> None:
    text = protogen.PROTO.read_text()
    assert protogen.vendoring_problem(text) is None
    edited = text.replace("int32 allocation_size", "int64 allocation_size")
    assert "changed below the vendoring header" in (protogen.vendoring_problem(edited) or "")
    headless = protogen.upstream_body(text)
    assert "header's closing line is missing" in (protogen.vendoring_problem(headless) or "")
