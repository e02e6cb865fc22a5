"""``asyncio.run`` for the commands, importing asyncio only when a command runs: ``stageline
--help`` never needs it (a sixth of the instructions of its whole process)."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_async"]

_T = TypeVar("_T")


def run_async(main: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(main)``."""
    import asyncio

    return asyncio.run(main)
