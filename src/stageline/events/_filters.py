"""Which events a sink wants: a severity threshold and filters by kind glob and category."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from stageline.ledger.records import Event

__all__ = ["LEVELS", "EventFilter", "level_number"]

LEVELS: dict[str, int] = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
"""Event levels, lowest first; a sink takes events at or above its ``min_level``."""


def level_number(level: str) -> int:
    """The rank of ``level``; an unknown level ranks as info, so it is neither lost nor loud."""
    return LEVELS.get(level.lower(), LEVELS["info"]) if isinstance(level, str) else LEVELS["info"]


@dataclass(frozen=True, kw_only=True)
class EventFilter:
    """Accepts events at or above ``min_level`` whose kind matches one of ``kinds`` (globs such
    as ``run.*``; ``!stage.*`` excludes) and whose category is one of ``categories``; an empty
    tuple accepts any."""

    min_level: str = "debug"
    kinds: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.min_level.lower() not in LEVELS:
            raise ValueError(f"unknown level {self.min_level!r}; use one of {', '.join(LEVELS)}")

    @classmethod
    def of(
        cls,
        *,
        min_level: str = "debug",
        kinds: Iterable[str] = (),
        categories: Iterable[str] = (),
    ) -> EventFilter:
        return cls(min_level=min_level, kinds=tuple(kinds), categories=tuple(categories))

    def accepts(self, event: Event) -> bool:
        if level_number(event.level) < LEVELS[self.min_level.lower()]:
            return False
        if self.categories and str(event.category) not in self.categories:
            return False
        if not self.kinds:
            return True
        kind, included = event.kind, None
        for pattern in self.kinds:
            if pattern.startswith("!"):
                if fnmatchcase(kind, pattern[1:]):
                    return False
            elif not included:
                included = fnmatchcase(kind, pattern)
        return included is not False  # only exclusions given: everything else passes


ACCEPT_ALL = EventFilter()
