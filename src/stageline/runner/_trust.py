"""Before a person's decision is applied: the run's checkpoint is exactly what stageline wrote.

The strict serializer refuses values it cannot trust (``checkpoints.StrictSerializer``). The
pending writes of the people's channels are checked against the ledger, which recorded them
when they were made: an interrupt the run waits at must be the one the ledger asked, a resume
value must be a decision the ledger holds, and a node that waits at an interrupt nobody has
answered yet has written nothing else (LangGraph keeps no other write of such a node).
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Interrupt

from stageline.errors import CheckpointCorrupt
from stageline.ledger import Wait, WaitKind
from stageline.runner._support import _config
from stageline.runner._trust_writes import check_writes

__all__ = ["check_checkpoint"]


async def check_checkpoint(
    saver: BaseCheckpointSaver[Any], run_id: str, waits: Sequence[Wait], step: str | None
) -> None:
    """Raise ``CheckpointCorrupt`` (naming the run and ``step``) unless the run's latest
    checkpoint reads back and its pending writes agree with the ledger's ``waits`` (and those of
    the subgraphs whose interrupts are still open, in their own namespaces)."""
    # A subgraph keeps its own interrupts and resume values in its own checkpoint namespace.
    spaces = {
        str(w.payload.get("namespace"))
        for w in waits
        if w.kind is WaitKind.INTERRUPT and w.status.open and w.payload.get("namespace")
    }
    for namespace in ["", *sorted(spaces)]:
        config = _config(run_id)
        config["configurable"]["checkpoint_ns"] = namespace
        try:
            saved = await saver.aget_tuple(typing.cast(Any, config))
        except CheckpointCorrupt as exc:
            raise exc.of(run_id, step) from exc
        if saved is None:
            if not namespace:
                return  # no checkpoint yet: nothing was asked, nothing can be forged
            continue
        check_writes(
            list(saved.pending_writes or ()),
            run_id,
            waits,
            step,
            is_interrupt=lambda value: isinstance(value, Interrupt),
        )
