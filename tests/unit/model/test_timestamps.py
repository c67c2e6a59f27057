"""Times as the API server writes them: what gpufleet writes reads back; bad input is absent."""

from datetime import UTC, datetime

from gpufleet.model.contract.timestamps import format_time, parse_time


def test_a_written_time_reads_back_to_the_second() -> None:
    t = datetime(2026, 12, 3, 10, 4, 5, 678_000, tzinfo=UTC)
    text = format_time(t)
    assert text == "2026-12-03T10:04:05Z"
    assert parse_time(text) == t.replace(microsecond=0)


def test_fractional_seconds_and_offsets_are_read() -> None:
    assert parse_time("2026-12-03T10:04:05.250000Z") == datetime(
        2026, 12, 3, 10, 4, 5, 250_000, tzinfo=UTC
    )
    assert parse_time("2026-12-03T11:04:05+01:00") == datetime(2026, 12, 3, 10, 4, 5, tzinfo=UTC)


def test_missing_or_malformed_times_read_as_absent() -> None:
    for raw in (None, "", "yesterday", 12):
        assert parse_time(raw) is None
