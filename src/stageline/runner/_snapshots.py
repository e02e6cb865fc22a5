"""A run's checkpoints as the runner reads them: ``CheckpointInfo`` (what ``history`` lists) and
``Snap`` (one with its raw values, for forks and edits)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CheckpointInfo", "Snap"]


@dataclass(frozen=True, kw_only=True)
class CheckpointInfo:
    """One checkpoint of a run, as ``Runner.history`` lists it."""

    run_id: str
    checkpoint_id: str
    parent_id: str | None
    step: int
    """LangGraph's step: -1 for the input, then one per superstep."""
    nodes: list[str]
    """The node(s) whose writes made this checkpoint (``__start__`` for the inputs)."""
    next: list[str]
    """The node(s) that run from this checkpoint (none once the run ended)."""
    source: str
    """``input``, ``loop`` (a step ran), ``update`` (a state edit) or ``fork``."""
    created_at: float
    values: dict[str, Any]
    """The run's state at this checkpoint."""
    changed: dict[str, Any] = field(default_factory=dict)
    """The keys whose values differ from the parent checkpoint's, with their new values."""
    interrupts: list[dict[str, Any]] = field(default_factory=list)
    """What the nodes of this step asked a person (id and payload), if anything."""

    def to_dict(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in self.__dataclass_fields__}
        data["node"] = ", ".join(self.nodes)  # as `history` prints it
        return data


@dataclass(frozen=True, kw_only=True)
class Snap:
    """A checkpoint as read from LangGraph, with its raw values (reserved keys included)."""

    info: CheckpointInfo
    raw: dict[str, Any]
