"""Stages: async callables ``(state, ctx) -> partial state`` with metadata."""

from stageline.stages._context import Journal, RunContext, StageContext, StageLogger
from stageline.stages._legacy import legacy_stage
from stageline.stages._node import LOOPS_KEY, failure_phase, make_node, merge_loop_counts
from stageline.stages._stage import Stage, lookup_stage, register_stage, stage

__all__ = [
    "LOOPS_KEY",
    "Journal",
    "RunContext",
    "Stage",
    "StageContext",
    "StageLogger",
    "failure_phase",
    "legacy_stage",
    "lookup_stage",
    "make_node",
    "merge_loop_counts",
    "register_stage",
    "stage",
]
