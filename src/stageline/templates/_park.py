"""Park gates: where a bounded loop that ran out of rounds waits, with the run ``parked``.

A person then grants more rounds (``approve``; ``changes`` does too, its note becoming the
next round's feedback), takes the work over (``takeover``: the run ends ``taken_over``, its
branch and worktree left for the person) or ends the run (``reject``: it ends ``rejected``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from langgraph.graph import END

from stageline.stages import DEFAULT_DEADLINE, deadline_steps, gate_stage
from stageline.templates._human import WaitNode, gate_router
from stageline.templates._shape import GateSpec

if TYPE_CHECKING:
    from stageline.templates._builder import Template

__all__ = ["add_park", "park_node"]


def add_park(
    template: Template,
    name: str,
    *,
    loop: str,
    head: str,
    rounds: int,
    feedback_key: str = "feedback",
    show: Sequence[str] = (),
) -> Template:
    """Add park gate ``name``: approve or changes grant loop ``loop`` ``rounds`` more rounds
    and go back to ``head``; takeover and reject end the run. It waits with no deadline step
    but a park."""
    made = park_node(
        name, loop=loop, head=head, rounds=rounds, feedback_key=feedback_key, show=show
    )
    template._add_waiting(made)
    template.add_edge(name, head)  # approve: along the gate's edge
    return template


def park_node(
    name: str,
    *,
    loop: str,
    head: str,
    rounds: int,
    feedback_key: str = "feedback",
    show: Sequence[str] = (),
) -> WaitNode:
    """Park gate ``name``, ready to add (see ``add_park``)."""
    steps = deadline_steps("park", "gate")
    made = gate_stage(
        name,
        changes_to=head,
        feedback_key=feedback_key,
        show=tuple(show),
        deadline=DEFAULT_DEADLINE,
        on_deadline=steps,
        park={"loop": loop, "rounds": rounds},
    )
    spec = GateSpec(
        name=name, changes_to=head, reject_to=None, deadline=DEFAULT_DEADLINE, on_deadline=steps
    )
    targets = {"changes": head, "reject": END, "takeover": END}
    return WaitNode(stage=made, spec=spec, route=gate_router(name), targets=targets)
