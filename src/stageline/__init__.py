"""stageline: durable pipelines for LLM agents, built on LangGraph.

A template is a graph of stages over a typed state; the runner executes it with a checkpoint
after every step, records every node attempt and event in a run ledger, and resumes exactly
where a run stopped.

The names below are imported on first use, so that ``import stageline.cli`` (and the command
line's ``--help`` and read commands) never pays for LangGraph.
"""

import typing as _typing
from importlib import import_module as _import_module

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

if _typing.TYPE_CHECKING:
    from stageline.config import Settings, load_settings
    from stageline.ledger import Event, NodeRecord, Run, RunStatus
    from stageline.runner import CheckpointInfo, Client, Runner, RunSummary, connect
    from stageline.stages import Budget, Stage, StageContext, legacy_stage, router_stage, stage
    from stageline.templates import END, Template, list_templates, load_template

_LAZY = {
    "Settings": "stageline.config",
    "load_settings": "stageline.config",
    "Event": "stageline.ledger",
    "NodeRecord": "stageline.ledger",
    "Run": "stageline.ledger",
    "RunStatus": "stageline.ledger",
    "Runner": "stageline.runner",
    "RunSummary": "stageline.runner",
    "CheckpointInfo": "stageline.runner",
    "Client": "stageline.runner",
    "connect": "stageline.runner",
    "Budget": "stageline.stages",
    "Stage": "stageline.stages",
    "StageContext": "stageline.stages",
    "legacy_stage": "stageline.stages",
    "router_stage": "stageline.stages",
    "stage": "stageline.stages",
    "END": "stageline.templates",
    "Template": "stageline.templates",
    "list_templates": "stageline.templates",
    "load_template": "stageline.templates",
}


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("stageline")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


def __getattr__(name: str) -> _typing.Any:
    if name == "__version__":
        globals()[name] = value = _version()
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stageline' has no attribute {name!r}")
    value = getattr(_import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__"})


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
