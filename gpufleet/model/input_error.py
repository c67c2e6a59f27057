"""`InputError`: bad user input, located by file, line and field.

Loaders of user-supplied files (traces, fleets, throughput profiles) and the checks of
command-line options raise it; every command-line entry point catches it once and prints
`<prog>: error: <file>:<line>: <field>: <what is wrong>` and exits with status 2, instead of a
traceback. It is a `ValueError`, so code that already treats bad values as `ValueError` keeps
working. It lives in the lowest layer because loaders of every layer raise it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["EXIT_BAD_INPUT", "InputError"]

# Exit status for bad input, as argparse uses for a bad command line.
EXIT_BAD_INPUT = 2


class InputError(ValueError):
    """What is wrong with an input, and where: `source` (a file), `line` (1-based), `field`.

    Any of the three may be missing: an option has no file (its field is the option's name),
    a missing file has no line.
    """

    def __init__(
        self,
        problem: str,
        *,
        source: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(problem)
        self.problem = problem
        self.source = None if source is None else str(source)
        self.line = line
        self.field = field

    def __str__(self) -> str:
        where = self.source or ""
        if where and self.line is not None:
            where = f"{where}:{self.line}"
        return ": ".join(part for part in (where, self.field, self.problem) if part)

    @classmethod
    def from_yaml_error(cls, exc: Exception, source: str | Path) -> InputError:
        """A PyYAML parse error of `source`, at the line its mark points to."""
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        line = mark.line + 1 if mark is not None else None
        return cls(f"not valid YAML: {problem}", source=source, line=line)

    def located(
        self, source: str | Path, line: int | None, field_prefix: str | None = None
    ) -> InputError:
        """The same problem placed in `source` at `line`, its field under `field_prefix`."""
        field = self.field
        if field_prefix:
            field = f"{field_prefix}.{field}" if field else field_prefix
        located = InputError(self.problem, source=source, line=line, field=field)
        located.__cause__ = self.__cause__
        return located
