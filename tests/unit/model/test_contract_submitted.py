"""When a gang's job was submitted, as pods carry it (`gpufleet.model.contract.submitted`).

Aspects: written as the API server writes times and read back; unknown writes nothing; a
missing, unreadable or zone-less value reads as unknown.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.model.contract import names
from gpufleet.model.contract.submitted import read_submitted, submitted_annotations

WHEN = datetime(2026, 12, 5, 10, 30, 15, tzinfo=UTC)


def test_written_and_read_back() -> None:
    annotations = submitted_annotations(WHEN)
    assert annotations == {names.SUBMITTED_AT: "2026-12-05T10:30:15Z"}
    assert read_submitted(annotations) == WHEN


def test_unknown_writes_nothing() -> None:
    assert submitted_annotations(None) == {}


@pytest.mark.parametrize("raw", [None, "", "yesterday", "2026-12-05T10:30:15"])
def test_missing_unreadable_or_zoneless_reads_as_unknown(raw: str | None) -> None:
    annotations = {} if raw is None else {names.SUBMITTED_AT: raw}
    assert read_submitted(annotations) is None
