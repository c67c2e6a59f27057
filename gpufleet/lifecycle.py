"""`with`-statement support for the servers, processes and clients gpufleet opens and closes."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["Closing", "StartStop"]


class Closing:
    """Mixin: `with obj:` calls `obj.close()` on exit."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class StartStop(Closing):
    """Mixin: `with obj:` calls `obj.start()` on entry and `obj.stop()` on exit."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.stop()

    def __enter__(self) -> Self:
        self.start()
        return self
