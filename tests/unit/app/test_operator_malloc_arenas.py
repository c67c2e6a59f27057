"""glibc's malloc arenas capped at two in the operator process (malloc_arenas.py): the mallopt
call, MALLOC_ARENA_MAX left to win, a C library without mallopt left alone; and the real call
on this platform's C library."""

from __future__ import annotations

import ctypes
import sys

import pytest

from gpufleet.app import malloc_arenas


class Libc:
    def __init__(self, answer: int = 1) -> None:
        self.calls: list[tuple[int, int]] = []
        self.answer = answer

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return self.answer


def test_it_caps_the_arenas_at_two(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    libc = Libc()
    assert malloc_arenas.limit_arenas(libc=libc)
    assert libc.calls == [(-8, 2)]  # M_ARENA_MAX in glibc's malloc.h


def test_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    libc = Libc()
    assert not malloc_arenas.limit_arenas(libc=libc)
    assert libc.calls == []


def test_a_refusal_or_a_library_without_mallopt_is_no_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert not malloc_arenas.limit_arenas(libc=Libc(answer=0))
    assert not malloc_arenas.limit_arenas(libc=object())


def test_the_real_c_library_takes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    glibc = sys.platform == "linux" and hasattr(ctypes.CDLL(None), "gnu_get_libc_version")
    assert malloc_arenas.limit_arenas() is glibc
