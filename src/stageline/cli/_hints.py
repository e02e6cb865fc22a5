"""What to do next about a failed run: only a command that can help.

``retry`` runs the failed node again on the same state, so it helps a failure of the world (an
agent, a network, a timeout) but not one the run's state or template causes: those name the
command that changes what failed.
"""

from __future__ import annotations

from stageline.ledger import Run

__all__ = ["PREFIXES", "failure_hint"]

_BY_PHASE = {
    # A stage refused the run's inputs: retry takes no inputs; a fork from the failed step does.
    "input": "fork with: stageline fork {run} -i KEY=VALUE (the inputs do not fit; "
    "retry takes none)",
    # The loop's count is in the checkpoint: a retry exceeds it again.
    "loop_bound": "fork with: stageline fork {run} --at STEP (the loop ran out of rounds; "
    "steps: stageline history {run})",
    # Parallel stages wrote one key: the template must give it a reducer first.
    "fan_in": "fix the template, then: stageline retry {run} --force (give the key a reducer)",
    # The side effect must be settled first; the error names the node and the key.
    "effect_in_doubt": "settle the effect, then: stageline retry {run} "
    "(stageline effect {run} NODE KEY --done or --redo)",
}
PREFIXES = ("retry with:", "fork with:", "fix the template, then:", "settle the effect, then:")
"""How each hint begins (a hint for a run kept in memory only is dropped: no command finds it)."""


def failure_hint(run: Run) -> str:
    """The next step for a failed run, as one line."""
    hint = _BY_PHASE.get(run.failure_phase or "")
    if hint is None:
        return f"retry with: stageline retry {run.run_id}"
    return hint.format(run=run.run_id)
