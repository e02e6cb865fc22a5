"""What the API takes and gives, as pydantic models (they make /openapi.json honest)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stageline.names import RUN_ID_PATTERN

__all__ = [
    "AnswerBody",
    "DecideBody",
    "EffectOut",
    "EffectSettleBody",
    "ErrorOut",
    "EventOut",
    "ForceBody",
    "NodeRecordOut",
    "RunDetail",
    "RunOut",
    "RunPageOut",
    "StartBody",
    "SummaryOut",
    "WaitOut",
]

TEMPLATE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$"
"""A template name as the API takes it: a name, never a path (no dot, no slash, so it can never
name a file: the registry finds it among built-ins, entry points and the templates folder)."""

MAX_ATTEMPT = 2**31 - 1
"""The largest attempt a request may name: the ledger keeps attempts as 32-bit integers."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorOut(BaseModel):
    detail: Any
    error: str | None = None


# -- what runs are made of -------------------------------------------------------------------


class RunOut(BaseModel):
    run_id: str
    template: str
    template_version: str
    status: str
    attempt: int
    inputs: dict[str, Any]
    created_at: float
    updated_at: float
    finished_at: float | None = None
    error: str | None = None
    failure_phase: str | None = None
    failed_node: str | None = None
    lease_holder: str | None = None
    lease_expires_at: float | None = None
    cancel_requested: bool = False
    last_seq: int = 0


class NodeRecordOut(BaseModel):
    run_id: str
    task_id: str
    attempt: int
    try_no: int
    node: str
    stage: str
    status: str
    started_at: float
    finished_at: float | None = None
    duration: float | None = None
    metrics: dict[str, Any] = {}
    error: str | None = None
    failure_phase: str | None = None


class WaitOut(BaseModel):
    """A gate, question set or interrupt: what was asked and what a person said; or a wait
    for CI (``kind`` ``ci``), which the forge answers."""

    run_id: str
    wait_id: str
    round: int
    kind: Literal["gate", "question", "interrupt", "ci"]
    name: str
    node: str
    attempt: int
    interrupt_id: str
    payload: dict[str, Any]
    requested_at: float
    deadline_at: float | None = None
    policy: list[str] = []
    policy_step: int = 0
    status: str
    response: dict[str, Any] | None = None
    actor: str | None = None
    note: str | None = None
    decided_at: float | None = None
    settled_at: float | None = None
    reason: str | None = None
    decision: str | None = None
    answers: dict[str, Any] | None = None
    value: Any = None
    """What an interrupt asks (``interrupt(value)``)."""
    answer: Any = None
    """What a person answered an interrupt with (the value its ``interrupt()`` returned)."""
    state_hash: str | None = None
    ci: dict[str, Any] | None = None
    """How the CI a ``ci`` wait waited on ended, as the forge said (its run id, conclusion,
    url)."""


class EffectOut(BaseModel):
    run_id: str
    node: str
    key: str
    attempt: int
    status: str
    result: Any = None
    started_at: float
    finished_at: float | None = None


class EventOut(BaseModel):
    run_id: str
    seq: int
    ts: float
    kind: str
    category: str
    level: str
    node: str | None = None
    message: str
    data: dict[str, Any]


class RunPageOut(BaseModel):
    runs: list[RunOut]
    next_cursor: str | None = Field(
        None, description="Pass as `cursor` for the next page; null on the last one."
    )


class SummaryOut(BaseModel):
    """A run after an action: its row, node records, latest state, what it waits on."""

    run: RunOut
    records: list[NodeRecordOut]
    state: dict[str, Any]
    waiting: list[WaitOut]


class RunDetail(SummaryOut):
    decisions: list[WaitOut]
    questions: list[WaitOut]
    interrupts: list[WaitOut] = []
    """Every interrupt the graph made itself, and what each was answered with."""
    ci: list[WaitOut] = []
    """Every wait for CI (forge mode): the commit and CI run waited on, and how it ended."""
    effects: list[EffectOut]
    lineage: dict[str, Any] | None = Field(
        None,
        description='`{"forked_from": {parent_run_id, parent_step, parent_checkpoint_id} or '
        'null, "forks": [...]}`; null for a run that is no fork and has none.',
    )


# -- what callers send -----------------------------------------------------------------------


class StartBody(_Body):
    template: str = Field(pattern=TEMPLATE_NAME, description="A template's name.")
    inputs: dict[str, Any] = Field(default_factory=dict, description="Its state keys.")
    run_id: str | None = Field(None, pattern=f"^{RUN_ID_PATTERN.pattern}$")
    deadlines: dict[str, str | Annotated[float, Field(allow_inf_nan=False)]] | None = Field(
        None, description="Gate or question node -> seconds or a duration (`2h`)."
    )
    budget: dict[str, Any] | None = Field(
        None, description='`{"tokens": 5000, "cost": 0.5}`: over it, the run waits at a gate.'
    )
    wait: bool = Field(False, description="Answer when the run ends or waits, not at once.")


class DecideBody(_Body):
    decision: Literal["approve", "reject", "changes", "takeover"]
    note: str | None = Field(None, max_length=10_000)
    gate: str | None = Field(None, max_length=200, description="Which gate, if several wait.")
    attempt: int | None = Field(
        None, ge=1, le=MAX_ATTEMPT, description="The attempt you decided on: stale -> 409."
    )
    state_hash: str | None = Field(
        None, max_length=200, description="The state you decided on: stale -> 409."
    )
    wait_id: str | None = Field(
        None,
        max_length=200,
        description="The visit of the gate you decided on (`wait_id` of `/pending`): decided "
        "meanwhile, or no longer waiting -> 409.",
    )
    seen_at: float | None = Field(
        None,
        allow_inf_nan=False,
        description="When you looked (epoch seconds): binds to the visit waiting then.",
    )
    force: bool = False


class AnswerBody(_Body):
    answers: dict[str, Any] = Field(description="Question id -> answer.")
    question_id: str | None = Field(
        None, max_length=200, description="Which question set, if several wait."
    )
    defaults: bool = Field(False, description="Fill unanswered questions with their defaults.")
    seen_at: float | None = Field(
        None,
        allow_inf_nan=False,
        description="When you looked (epoch seconds): binds to the question set waiting then.",
    )
    force: bool = False


class RespondBody(_Body):
    value: Any = Field(
        description="The answer: the value the node's `interrupt()` returns (any JSON; for an "
        'Agent-Inbox HumanInterrupt, {"type": "accept"|"edit"|"response"|"ignore", "args": ...}).'
    )
    wait_id: str | None = Field(
        None,
        max_length=200,
        description="Which interrupt (`wait_id` of `/pending`): answered meanwhile -> 409.",
    )
    seen_at: float | None = Field(
        None,
        allow_inf_nan=False,
        description="When you looked (epoch seconds): binds to the interrupt waiting then.",
    )
    force: bool = False


class ForceBody(_Body):
    force: bool = Field(False, description="Go on though the template changed since.")


class EffectSettleBody(_Body):
    node: str = Field(min_length=1, max_length=200)
    key: str = Field(min_length=1, max_length=300)
    done: bool = Field(description="true: it happened (with `result`); false: run it again.")
    result: Any = None
