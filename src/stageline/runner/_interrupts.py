"""A graph's own ``interrupt(value)``, anywhere (a stage, a plain node, a subgraph), as a wait.

Stageline's gates and question sets interrupt with payloads it wrote; any other value is an
``interrupt`` wait: its value kept as asked, where it was asked (the node, and the namespace
and path of a subgraph), and a deadline (default: a day, then it stays parked for a person, or
the run's own ``deadlines`` for the node). The answer is the value the node's ``interrupt()``
returns; an Agent-Inbox ``HumanInterrupt`` is answered with a list of one response.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from stageline.config import Settings
from stageline.errors import AnswerInvalid
from stageline.ledger import INBOX_TYPES, Run, Wait, WaitKind
from stageline.runner._support import _config
from stageline.stages import DEFAULT_DEADLINE, parse_duration

__all__ = [
    "INTERRUPT_POLICY",
    "Policy",
    "check_inbox_answer",
    "human_interrupt",
    "interrupt_places",
    "interrupt_policy",
    "interrupt_wait",
    "plain",
]

INTERRUPT_POLICY = ("remind", "escalate", "park")
"""What the sweeper does at an interrupt's deadline: remind, escalate, then it stays parked."""

Policy = tuple[float, tuple[str, ...]]
"""An interrupt's deadline: seconds, and the steps the sweeper takes (ending ``park``/``fail``)."""

Place = tuple[str, str, tuple[str, ...]]
"""Where an interrupt was asked: the run's node, the namespace, the path of node names."""


def interrupt_policy(settings: Settings) -> Policy:
    """The project's deadline for interrupts (``[interrupts]`` in stageline.toml)."""
    conf = settings.interrupts
    seconds = parse_duration(conf.deadline, "[interrupts] deadline")
    return seconds, ("remind", "escalate", conf.on_deadline)


def plain(value: Any) -> Any:
    """A value as the ledger keeps it (JSON)."""
    return json.loads(json.dumps(value, default=str))


def human_interrupt(value: Any) -> Mapping[str, Any] | None:
    """The Agent-Inbox ``HumanInterrupt`` ``value`` asks (itself, or the one in a list of one,
    as ``interrupt([request])[0]`` asks), else None."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if (
        isinstance(value, Mapping)
        and isinstance(value.get("action_request"), Mapping)
        and isinstance(value.get("config"), Mapping)
    ):
        return value
    return None


def check_inbox_answer(asked: Any, value: Any) -> Any:
    """``value`` as the resume list of the ``HumanInterrupt`` ``asked`` (``human_interrupt``),
    checked against its ``config``: one
    response ``{"type": accept|edit|response|ignore, "args": ...}`` (or a list of one)."""
    response = value[0] if isinstance(value, list) and len(value) == 1 else value
    kind = response.get("type") if isinstance(response, Mapping) else None
    if kind not in INBOX_TYPES:
        raise AnswerInvalid(
            'this interrupt takes an Agent-Inbox response: {"type": "accept", "edit", '
            '"response" or "ignore", "args": ...}'
        )
    if not asked["config"].get(INBOX_TYPES[kind]):
        allowed = [t for t, key in INBOX_TYPES.items() if asked["config"].get(key)]
        raise AnswerInvalid(
            f"this interrupt does not allow {kind!r}; it allows: {', '.join(allowed) or 'none'}"
        )
    args = response.get("args")
    if kind == "edit" and not isinstance(args, Mapping):
        raise AnswerInvalid('an "edit" response needs args: {"action": ..., "args": {...}}')
    if kind == "response" and not isinstance(args, str):
        raise AnswerInvalid('a "response" needs args: the text of the response')
    return [{"type": kind, "args": args}]


async def interrupt_places(graph: Any, run_id: str) -> dict[str, Place]:
    """Where each interrupt the run waits at was asked, by interrupt id (read from the graph's
    state, subgraphs included); empty when the state cannot say."""
    try:
        snapshot = await graph.aget_state(_config(run_id), subgraphs=True)
    except Exception:
        return {}
    places: dict[str, Place] = {}

    async def walk(state: Any, node: str | None, ns: str, path: tuple[str, ...]) -> None:
        for task in state.tasks:
            inner = getattr(task, "state", None)
            here = (*path, task.name)
            if inner is not None and getattr(inner, "tasks", None) is not None:
                sub_ns = str(inner.config.get("configurable", {}).get("checkpoint_ns", ""))
                await walk(inner, node or task.name, sub_ns, here)
            for found in task.interrupts:
                where = ns
                if found.id not in places and not ns:  # a subgraph the node itself invoked?
                    where = await _invoked_in(graph, run_id, f"{task.name}:{task.id}", found.id)
                places.setdefault(found.id, (node or task.name, where, here))

    await walk(snapshot, None, "", ())
    return places


async def _invoked_in(graph: Any, run_id: str, ns: str, interrupt_id: str) -> str:
    """``ns`` when a subgraph that a node invoked itself keeps the interrupt pending in its own
    checkpoint there (its namespace: the node's task), else the root's ``""``."""
    config = _config(run_id)
    config["configurable"]["checkpoint_ns"] = ns
    try:
        saved = await graph.checkpointer.aget_tuple(config)
    except Exception:
        return ""
    for _task, channel, value in (saved.pending_writes or ()) if saved is not None else ():
        if channel == "__interrupt__" and any(
            getattr(i, "id", None) == interrupt_id
            for i in (value if isinstance(value, list | tuple) else [value])
        ):
            return ns
    return ""


def interrupt_wait(
    run: Run, interrupt: Any, place: Place | None, now: float, policy: Policy | None = None
) -> Wait:
    """The wait of an interrupt that is no gate's or question's; ``policy`` is the project's
    deadline for interrupts (``[interrupts]`` in stageline.toml), the run's own ``deadlines``
    for the node go over it."""
    node, namespace, path = place or ("?", "", ())
    name = "/".join(path) or node
    seconds, steps = policy or (DEFAULT_DEADLINE, INTERRUPT_POLICY)
    overrides = run.inputs.get("stageline_deadlines") or {}
    seconds = float(overrides.get(node) or overrides.get(name) or seconds)
    value = plain(interrupt.value)
    return Wait(
        run_id=run.run_id,
        wait_id=str(interrupt.id),
        kind=WaitKind.INTERRUPT,
        name=name,
        node=node,
        attempt=run.attempt,
        interrupt_id=str(interrupt.id),
        payload={
            "kind": "interrupt",
            "value": value,
            "namespace": namespace,
            "path": list(path),
            "human": human_interrupt(value) is not None,
            "inbox": human_interrupt(value),
        },
        requested_at=now,
        deadline_at=now + seconds,
        policy=tuple(steps),
    )
