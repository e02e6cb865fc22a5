"""Operations: one harness-driven lifecycle with failure phases, used as stages (seed 003).

Templates call ``operation_stage``; the request building, event classification, transcript
and failure recording live here and nowhere else (an architecture test holds that).
"""

from stageline.operations._apply import add_apply, apply_changes, isolation_of
from stageline.operations._classify import TOOL_KINDS, classify, fallback_event
from stageline.operations._isolation import WritesOutside
from stageline.operations._models import (
    SERVICE_FRESH,
    SERVICE_HARNESS,
    SERVICE_LIVE,
    SERVICE_SINKS,
    FailurePhase,
    HarnessEventSink,
    LiveCallback,
    OperationContext,
    PostStep,
)
from stageline.operations._recorder import transcript_path
from stageline.operations._runner import OperationRunner, one_line_summary
from stageline.operations._stage import OperationInputs, operation_stage
from stageline.operations._worktree import (
    Isolation,
    apply_to_checkout,
    commit_all,
    isolate,
    revert,
)

__all__ = [
    "SERVICE_FRESH",
    "SERVICE_HARNESS",
    "SERVICE_LIVE",
    "SERVICE_SINKS",
    "TOOL_KINDS",
    "FailurePhase",
    "HarnessEventSink",
    "Isolation",
    "LiveCallback",
    "OperationContext",
    "OperationInputs",
    "OperationRunner",
    "PostStep",
    "WritesOutside",
    "add_apply",
    "apply_changes",
    "apply_to_checkout",
    "classify",
    "commit_all",
    "fallback_event",
    "isolate",
    "isolation_of",
    "one_line_summary",
    "operation_stage",
    "revert",
    "transcript_path",
]
