"""Logging of a `gpufleet operator` process: text lines for people, JSON lines for collectors."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from gpufleet.settings import LogFormat, LogLevel, LogSettings

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, and the
    exception's traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


def configure(settings: LogSettings) -> None:
    """The root logger at `settings.level`, writing to stderr in `settings.format`."""
    handler = logging.StreamHandler()
    if settings.format is LogFormat.JSON:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.level.value)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    # urllib3 logs each retry of a failed connection (three per request of the generated
    # client) while the API server is down; the Lease keeper and the informers say it once.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    if settings.level is not LogLevel.DEBUG:
        # kopf logs every successful handler run (each timer tick) at INFO.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
