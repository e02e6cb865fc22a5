"""Before a person's decision is applied: the run's checkpoint is exactly what stageline wrote.

The strict serializer refuses values it cannot trust (``checkpoints.StrictSerializer``). The
pending writes of the people's channels are checked against the ledger, which recorded them
when they were made: an interrupt the run waits at must be the one the ledger asked, a resume
value must be a decision the ledger holds, and a node that waits at an interrupt nobody has
answered yet has written nothing else (LangGraph keeps no other write of such a node).
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Interrupt

from stageline.errors import CheckpointCorrupt
from stageline.ledger import Wait
from stageline.runner._support import _config
from stageline.runner._waits import human_payload

__all__ = ["check_checkpoint"]

_RESUME, _INTERRUPT = "__resume__", "__interrupt__"  # LangGraph's pending-write channels


def _plain(value: Any) -> Any:
    """A value as the ledger keeps it (JSON), to compare with what it recorded."""
    return json.loads(json.dumps(value, default=str))


async def check_checkpoint(saver: BaseCheckpointSaver[Any], run_id: str, waits: Sequence[Wait],
                           step: str | None) -> None:
    """Raise ``CheckpointCorrupt`` (naming the run and ``step``) unless the run's latest
    checkpoint reads back and its pending writes agree with the ledger's ``waits``."""
    try:
        saved = await saver.aget_tuple(typing.cast(Any, _config(run_id)))
    except CheckpointCorrupt as exc:
        raise exc.of(run_id, step) from exc
    if saved is None:
        return
    asked: dict[str, list[Any]] = {}
    for wait in waits:
        asked.setdefault(wait.interrupt_id, []).append(_plain(dict(wait.payload)))
    said = {w.token: _plain(dict(w.response)) for w in waits if w.response is not None}
    writes = list(saved.pending_writes or ())
    waiting = ({task for task, channel, _ in writes if channel == _INTERRUPT}
               - {task for task, channel, _ in writes if channel == _RESUME})
    for task, channel, value in writes:
        values = value if isinstance(value, list | tuple) else [value]
        if channel == _INTERRUPT:
            for interrupt in values:
                if not isinstance(interrupt, Interrupt):  # LangGraph writes nothing else there
                    raise CheckpointCorrupt(f"a pending interrupt of task {task} is a "
                                            f"{type(interrupt).__name__}, not an interrupt",
                                            run_id=run_id, step=step)
                payload = human_payload(interrupt.value)
                if payload is None:
                    continue  # not a gate's or question's: the ledger has nothing to say
                mine = _plain({k: v for k, v in payload.items() if k != "refused"})
                if mine not in asked.get(str(interrupt.id), []):
                    raise CheckpointCorrupt(
                        f"the pending interrupt of task {task} is not the one the ledger asked",
                        run_id=run_id, step=step)
        elif channel == _RESUME:
            for resume in values:
                token = resume.get("token") if isinstance(resume, Mapping) else None
                if token is None or said.get(str(token)) != _plain(resume):
                    raise CheckpointCorrupt(
                        f"a pending resume value of task {task} is no decision the ledger "
                        "recorded", run_id=run_id, step=step)
        elif task in waiting:  # not resumed yet: it cannot have written anything else
            raise CheckpointCorrupt(
                f"task {task} waits at an interrupt, yet has a pending write to {channel!r} "
                "that it never made", run_id=run_id, step=step)
