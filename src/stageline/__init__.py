"""stageline: durable pipelines for LLM agents, built on LangGraph.

A template is a graph of stages over a typed state; the runner executes it with a checkpoint
after every step, records every node attempt and event in a run ledger, and resumes exactly
where a run stopped.
"""

from importlib import metadata as _metadata

from stageline.config import Settings, load_settings
from stageline.errors import (
    ConflictError,
    InputError,
    LeaseHeld,
    RunNotFound,
    StagelineError,
    StorageError,
    TemplateChanged,
    TemplateError,
    TemplateNotFound,
    UsageError,
)
from stageline.ledger import Event, NodeRecord, Run, RunStatus
from stageline.runner import CheckpointInfo, Client, Runner, RunSummary, connect
from stageline.stages import Budget, Stage, StageContext, legacy_stage, router_stage, stage
from stageline.templates import END, Template, list_templates, load_template

try:
    __version__ = _metadata.version("stageline")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "END",
    "Budget",
    "CheckpointInfo",
    "Client",
    "ConflictError",
    "Event",
    "InputError",
    "LeaseHeld",
    "NodeRecord",
    "Run",
    "RunNotFound",
    "RunStatus",
    "RunSummary",
    "Runner",
    "Settings",
    "Stage",
    "StageContext",
    "StagelineError",
    "StorageError",
    "Template",
    "TemplateChanged",
    "TemplateError",
    "TemplateNotFound",
    "UsageError",
    "__version__",
    "connect",
    "legacy_stage",
    "list_templates",
    "load_settings",
    "load_template",
    "router_stage",
    "stage",
]
