"""Command-line plumbing shared by `gpufleet` and the `bench/` scripts: bad input is one line.

* `OneLineParser`: an argparse parser whose errors are one line, `<prog>: error: <message>`,
  exit status 2 (argparse's status), without the usage block.
* Value types for options that must be positive, non-negative, fractions, integer lists or
  writable output paths, so a bad number is rejected before any work starts.
* `input_error_exit`: what an entry point does with an `InputError` it caught.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, cast

from gpufleet.model.input_error import EXIT_BAD_INPUT, InputError

__all__ = [
    "OneLineParser",
    "add_subcommands",
    "ensure_output_dir",
    "fraction",
    "input_error_exit",
    "non_negative_float",
    "non_negative_int",
    "non_negative_int_list",
    "open_fraction",
    "output_dir",
    "output_file",
    "positive_float",
    "positive_int",
]


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line errors (sub-parsers made from it are of this class too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see --help)\n")


def add_subcommands(
    parser: OneLineParser, dest: str
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """Required sub-commands of `parser`; their parsers are `OneLineParser`s too (typed as the
    plain parsers the `add_*_parser` helpers take)."""
    return cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest=dest, required=True),
    )


def input_error_exit(prog: str, exc: InputError) -> int:
    """Print `exc` as one line on stderr and return the bad-input exit status."""
    print(f"{prog}: error: {exc}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _number(text: str, kind: Callable[[str], float], noun: str) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = int(_number(text, int, "an integer"))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    value = int(_number(text, int, "an integer"))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def non_negative_int_list(text: str) -> list[int]:
    """Comma-separated integers >= 0 (empty items ignored), e.g. seeds `1,2,3`."""
    return [non_negative_int(item.strip()) for item in text.split(",") if item.strip()]


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _number(text, float, "a number")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value:g}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    value = _number(text, float, "a number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value:g}")
    return value


def fraction(text: str) -> float:
    """A number in [0, 1]."""
    value = _number(text, float, "a number")
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value:g}")
    return value


def open_fraction(text: str) -> float:
    """A number strictly between 0 and 1 (a quantile)."""
    value = _number(text, float, "a number")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1, got {value:g}")
    return value


def _file_in_the_way(path: Path) -> Path | None:
    """The path itself or the first ancestor that exists and is not a directory."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return None if candidate.is_dir() else candidate
    return None


def output_dir(text: str) -> Path:
    """A directory to write into: it may not exist yet, but no file may stand in its way."""
    path = Path(text)
    blocker = _file_in_the_way(path)
    if blocker is not None:
        raise argparse.ArgumentTypeError(f"{blocker} is an existing file, not a directory")
    return path


def output_file(text: str) -> Path:
    """A file to write: not a directory, in a directory that exists."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a directory, not a file")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"directory {path.parent} does not exist")
    return path


def ensure_output_dir(path: Path, option: str) -> None:
    """Create the output directory now (before any work), or say which option is wrong."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise InputError(f"cannot create directory {path}: {reason}", field=option) from exc
