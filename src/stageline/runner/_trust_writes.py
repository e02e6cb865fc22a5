"""A checkpoint's pending writes against the ledger (see ``_trust``): no LangGraph here, so
``show`` can check a waiting run's checkpoint as its own reader decoded it."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stageline.errors import CheckpointCorrupt
from stageline.ledger import Wait, WaitKind

__all__ = ["check_writes", "human_payload"]

_RESUME, _INTERRUPT = "__resume__", "__interrupt__"  # LangGraph's pending-write channels


def _plain(value: Any) -> Any:
    """A value as the ledger keeps it (JSON), to compare with what it recorded."""
    return json.loads(json.dumps(value, default=str))


def human_payload(value: Any) -> Mapping[str, Any] | None:
    """The interrupt payload of a gate, a question node or a CI wait (stageline's own), or None
    for any other interrupt."""
    if (
        isinstance(value, Mapping)
        and value.get("kind") in ("gate", "question", "ci")
        and "node" in value
        and "attempt" in value
    ):
        return value
    return None


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def check_writes(
    writes: Sequence[tuple[str, str, Any]],
    run_id: str,
    waits: Sequence[Wait],
    step: str | None,
    *,
    is_interrupt: Callable[[Any], bool],
) -> None:
    """Raise ``CheckpointCorrupt`` unless the pending ``writes`` (task, channel, value) agree
    with the ledger's ``waits``; ``is_interrupt`` says what an interrupt (with ``id`` and
    ``value``) is."""
    asked: dict[str, list[Any]] = {}
    for wait in waits:
        asked.setdefault(wait.interrupt_id, []).append(_plain(dict(wait.payload)))
    said = {w.token: _plain(dict(w.response)) for w in waits if w.response is not None}
    # The graph's own interrupts: the value asked, and the values the ledger recorded as answers
    # (the node takes the answer as it is, with no token; a subgraph keeps it in its own
    # checkpoint, so its task here may have gone on behind an interrupt the ledger answered).
    values = [w for w in waits if w.kind is WaitKind.INTERRUPT]
    answered = [_plain(w.response.get("value")) for w in values if w.response is not None]
    done = {w.interrupt_id for w in values if w.response is not None}
    waiting = {
        task
        for task, channel, value in writes
        if channel == _INTERRUPT and not {str(getattr(i, "id", "")) for i in _listed(value)} <= done
    } - {task for task, channel, _ in writes if channel == _RESUME}
    for task, channel, value in writes:
        if channel == _INTERRUPT:
            for interrupt in _listed(value):
                if not is_interrupt(interrupt):  # LangGraph writes nothing else there
                    raise CheckpointCorrupt(
                        f"a pending interrupt of task {task} is a "
                        f"{type(interrupt).__name__}, not an interrupt",
                        run_id=run_id,
                        step=step,
                    )
                payload = human_payload(interrupt.value)
                if payload is None:  # the graph's own: the ledger kept the value it asked
                    mine = _plain(interrupt.value)
                    ours = [a.get("value") for a in asked.get(str(interrupt.id), [])]
                else:
                    mine = _plain({k: v for k, v in payload.items() if k != "refused"})
                    ours = asked.get(str(interrupt.id), [])
                if mine not in ours:
                    raise CheckpointCorrupt(
                        f"the pending interrupt of task {task} is not the one the ledger asked",
                        run_id=run_id,
                        step=step,
                    )
        elif channel == _RESUME:
            for resume in _listed(value):
                token = resume.get("token") if isinstance(resume, Mapping) else None
                if token is not None and said.get(str(token)) == _plain(resume):
                    continue
                if _plain(resume) not in answered:
                    raise CheckpointCorrupt(
                        f"a pending resume value of task {task} is no decision the ledger recorded",
                        run_id=run_id,
                        step=step,
                    )
        elif task in waiting:  # not resumed yet: it cannot have written anything else
            raise CheckpointCorrupt(
                f"task {task} waits at an interrupt, yet has a pending write to {channel!r} "
                "that it never made",
                run_id=run_id,
                step=step,
            )
