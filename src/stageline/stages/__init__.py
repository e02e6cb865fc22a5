"""Stages: async callables ``(state, ctx) -> partial state`` with metadata."""

from stageline.stages._budget import (
    BUDGET_INPUT,
    Budget,
    BudgetRejected,
    budget_gate,
    enforce_budget,
    live_overrun,
    overrun,
)
from stageline.stages._context import Journal, RunContext, StageContext, StageLogger
from stageline.stages._human import gate_stage, question_stage
from stageline.stages._infer import Inferred, infer_stage
from stageline.stages._legacy import legacy_stage
from stageline.stages._node import (
    LOOPS_KEY,
    failure_phase,
    input_shape,
    make_node,
    merge_loop_counts,
)
from stageline.stages._questions import normalize_questions, question_id, validate_answers
from stageline.stages._registry import lookup_stage, register_stage, registered_stages, stage
from stageline.stages._router import ROUTER_SEED_ENV, Router, router_stage, thompson_scores
from stageline.stages._stage import Stage
from stageline.stages._waiting import (
    DECISIONS,
    DEFAULT_DEADLINE,
    deadline_steps,
    parse_duration,
    state_hash,
)
from stageline.statekeys import GATES_KEY, RESERVED_KEYS

__all__ = [
    "BUDGET_INPUT",
    "DECISIONS",
    "DEFAULT_DEADLINE",
    "GATES_KEY",
    "LOOPS_KEY",
    "RESERVED_KEYS",
    "ROUTER_SEED_ENV",
    "Budget",
    "BudgetRejected",
    "Inferred",
    "Journal",
    "Router",
    "RunContext",
    "Stage",
    "StageContext",
    "StageLogger",
    "budget_gate",
    "deadline_steps",
    "enforce_budget",
    "failure_phase",
    "gate_stage",
    "infer_stage",
    "input_shape",
    "legacy_stage",
    "live_overrun",
    "lookup_stage",
    "make_node",
    "merge_loop_counts",
    "normalize_questions",
    "overrun",
    "parse_duration",
    "question_id",
    "question_stage",
    "register_stage",
    "registered_stages",
    "router_stage",
    "stage",
    "state_hash",
    "thompson_scores",
    "validate_answers",
]
