"""The operation's small vocabulary: failure phases, its context, post steps, event sinks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from stageline.harnesses import HarnessEvent, HarnessResult
from stageline.ledger import EventCategory
from stageline.operations._worktree import Isolation

__all__ = [
    "SERVICE_FRESH",
    "SERVICE_HARNESS",
    "SERVICE_LIVE",
    "SERVICE_SINKS",
    "FailurePhase",
    "HarnessEventSink",
    "LiveCallback",
    "OperationContext",
    "PostStep",
]

SERVICE_HARNESS = "harness"
"""``services[SERVICE_HARNESS]``: a ``Harness`` object to use instead of the state's spec."""
SERVICE_SINKS = "harness_sinks"
"""``services[SERVICE_SINKS]``: extra ``HarnessEventSink`` objects (one, or a list)."""
SERVICE_LIVE = "harness_live"
"""``services[SERVICE_LIVE]``: a callable given every event live, text deltas included."""
SERVICE_FRESH = "harness_fresh"
"""``services[SERVICE_FRESH]``: true to start agents afresh instead of resuming their session."""


class FailurePhase(StrEnum):
    SOURCE_PREPARATION = "source_preparation"  # the caller's own preparation (inputs, sources)
    HARNESS_READINESS = "harness_readiness"  # the agent cannot run here
    PROVIDER_EXECUTION = "provider_execution"  # the agent ran and failed, or its adapter raised
    INDEXING = "indexing"  # a post step refreshing an index
    VALIDATION = "validation"  # a post step checking the output
    INTERNAL_ERROR = "internal_error"  # recording failed: an event sink, the ledger, a transcript


@dataclass(kw_only=True)
class OperationContext:
    """What every step of one operation shares: where it runs and what the caller prepared."""

    run_id: str
    node: str
    repo: Path
    run_dir: Path
    harness: str
    model: str | None = None
    prepared: dict[str, Any] = field(default_factory=dict)
    """What the caller's preparation returned, for its prompt, script and post steps."""
    isolation: Isolation | None = None
    """The run's worktree and branch (``repo`` is then the worktree), unless not isolated."""
    allowed: tuple[str, ...] = ("",)
    """Where the agent may write, relative to the repository (``""``: anywhere in it)."""


PostStepFn = Callable[
    [Any, OperationContext, HarnessResult],
    "Mapping[str, Any] | Awaitable[Mapping[str, Any] | None] | None",
]


@dataclass(frozen=True, kw_only=True)
class PostStep:
    """A step after a successful harness run, e.g. refresh an index or validate the output.

    ``run(state, op, result)`` may return state updates; an exception fails the operation in
    ``phase``.
    """

    name: str
    phase: FailurePhase
    run: PostStepFn


class HarnessEventSink(Protocol):
    """Caller-owned persistence of harness events; a sink raising fails in ``internal_error``."""

    def record(
        self, event: HarnessEvent, *, category: EventCategory, node: str, **future_kwargs: Any
    ) -> None: ...


LiveCallback = Callable[[HarnessEvent], None]
"""Given each event as it happens (text deltas too); not durable, and never fatal."""
