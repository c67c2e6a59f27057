"""The test tree itself: one pytest run collects every module of it (`make test`)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]


def test_no_two_test_modules_share_a_file_name() -> None:
    # pytest imports test modules by their file name (the "prepend" import mode, and test
    # directories without __init__.py), so a second module of the same name anywhere in the
    # tree stops the whole run at collection, which a run of one directory does not show.
    where: defaultdict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        where[path.name].append(str(path.relative_to(TESTS)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert shared == {}
