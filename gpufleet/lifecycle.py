"""`with`-statement support for the servers and processes gpufleet starts and stops."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["StartStop"]


class StartStop:
    """Mixin: `with obj:` calls `obj.start()` on entry and `obj.stop()` on exit."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
