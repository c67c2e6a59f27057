"""Checked reading of CSV trace files: every problem is an `InputError` naming file, line, field.

`read_rows(path, columns)` yields one `Row` per data line after checking that the file exists
and has a header with the needed columns, and that the row has as many fields as the header;
it raises when the file holds no data row at all (an empty or header-only trace is always a
mistake). `Row` parses its fields (integers, finite numbers with bounds, timestamps) and raises
with the row's line and the column's name when a value does not fit.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path

from gpufleet.model.input_error import InputError

__all__ = ["Row", "read_rows"]


class Row:
    """One data row of a CSV file, with parsers that name its line and the column on error."""

    __slots__ = ("line", "source", "values")

    def __init__(self, source: Path, line: int, values: dict[str, str]) -> None:
        self.source = source
        self.line = line
        self.values = values

    def error(self, field: str, problem: str) -> InputError:
        """An `InputError` about `field` of this row."""
        return InputError(problem, source=self.source, line=self.line, field=field)

    def text(self, field: str, *, required: bool = True) -> str:
        """The raw value, stripped; an empty value is an error when `required`."""
        value = (self.values.get(field) or "").strip()
        if required and not value:
            raise self.error(field, "missing value")
        return value

    def integer(self, field: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
        """An integer value within the bounds."""
        raw = self.text(field)
        try:
            value = int(raw)
        except ValueError:
            raise self.error(field, f"{raw!r} is not an integer") from None
        self._check_bounds(field, value, minimum, maximum)
        return value

    def number(self, field: str, *, minimum: float | None = None) -> float:
        """A finite number, at least `minimum`."""
        raw = self.text(field)
        try:
            value = float(raw)
        except ValueError:
            raise self.error(field, f"{raw!r} is not a number") from None
        if not math.isfinite(value):
            raise self.error(field, f"{raw!r} is not a finite number")
        self._check_bounds(field, value, minimum, None)
        return value

    def timestamp(self, field: str, parse: Callable[[str], datetime], form: str) -> datetime:
        """A date and time read by `parse`; `form` says what was expected."""
        raw = self.text(field)
        try:
            return parse(raw)
        except ValueError:
            raise self.error(field, f"{raw!r} is not a timestamp ({form})") from None

    def _check_bounds(
        self, field: str, value: float, minimum: float | None, maximum: float | None
    ) -> None:
        if minimum is not None and value < minimum:
            raise self.error(field, f"{value:g} is below the minimum {minimum:g}")
        if maximum is not None and value > maximum:
            raise self.error(field, f"{value:g} is above the maximum {maximum:g}")


def read_rows(path: str | Path, columns: Sequence[str]) -> Iterator[Row]:
    """The data rows of the CSV file at `path`, which must have at least `columns`."""
    source = Path(path)
    try:
        handle = source.open(newline="", encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", source=source) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a CSV file", source=source) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", source=source) from None
    with handle:
        reader = csv.DictReader(handle)
        try:
            yield from _rows(reader, source, columns)
        except csv.Error as exc:
            raise InputError(f"malformed CSV: {exc}", source=source, line=reader.line_num) from None
        except UnicodeDecodeError:
            raise InputError(
                "not UTF-8 text", source=source, line=_undecodable_line(source)
            ) from None


def _rows(reader: csv.DictReader[str], source: Path, columns: Sequence[str]) -> Iterator[Row]:
    header = reader.fieldnames
    if not header:
        raise InputError(
            f"empty file; expected the header {','.join(columns)}", source=source, line=1
        )
    missing = [c for c in columns if c not in header]
    if missing:
        raise InputError(
            f"missing column (the header has {','.join(header)})",
            source=source,
            line=1,
            field=missing[0],
        )
    count = 0
    for record in reader:
        line = reader.line_num
        extra = record.get(None)
        if extra:
            raise InputError(
                f"the row has {len(header) + len(extra)} fields, the header {len(header)}",
                source=source,
                line=line,
            )
        absent = [name for name in header if record.get(name) is None]
        if absent:
            raise InputError(
                f"missing value: the row has {len(header) - len(absent)} of {len(header)} "
                "fields (truncated?)",
                source=source,
                line=line,
                field=absent[0],
            )
        count += 1
        yield Row(source, line, record)
    if count == 0:
        raise InputError("no data rows after the header", source=source, line=2)


def _undecodable_line(source: Path) -> int | None:
    """The first line that is not UTF-8 (the text reader decodes in chunks, so it cannot say)."""
    with source.open("rb") as raw:
        for number, data in enumerate(raw, start=1):
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return None
