"""Logging of `gpufleet operator`: JSON lines carry time, level, logger, message and the
traceback; `configure` installs one handler at the chosen level and format, quiets kopf's
per-handler INFO lines unless at DEBUG."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

import pytest

from gpufleet.app.logs import JsonFormatter, configure
from gpufleet.settings import LogFormat, LogLevel, LogSettings


def test_a_json_record_is_one_object_per_line() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logging.LogRecord(
            "gpufleet.scheduler", logging.WARNING, __file__, 1, "cycle=%d %s", (3, "x"),
            sys.exc_info(),
        )  # fmt: skip
    line = JsonFormatter().format(record)
    assert "\n" not in line
    out = json.loads(line)
    assert (out["level"], out["logger"], out["message"]) == ("WARNING", "gpufleet.scheduler",
                                                             "cycle=3 x")  # fmt: skip
    assert out["time"].endswith("+00:00")
    assert "RuntimeError: boom" in out["exception"]


@pytest.fixture
def root() -> Iterator[logging.Logger]:
    """The root logger, restored after the test."""
    logger = logging.getLogger()
    handlers, level = list(logger.handlers), logger.level
    kopf_level = logging.getLogger("kopf.objects").level
    yield logger
    logger.handlers[:] = handlers
    logger.setLevel(level)
    logging.getLogger("kopf.objects").setLevel(kopf_level)


def test_configure_sets_level_and_format(root: logging.Logger) -> None:
    configure(LogSettings(level=LogLevel.WARNING, format=LogFormat.JSON))
    assert root.level == logging.WARNING and len(root.handlers) == 1
    assert isinstance(root.handlers[0].formatter, JsonFormatter)
    assert logging.getLogger("kopf.objects").level == logging.WARNING
    configure(LogSettings(level=LogLevel.DEBUG))
    assert root.level == logging.DEBUG and len(root.handlers) == 1
    assert not isinstance(root.handlers[0].formatter, JsonFormatter)
