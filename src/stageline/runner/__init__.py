"""The runner: one execution path for the CLI, the API, workers and Python callers.

Names are imported on first use: the read helpers (``pending_waits``, ``outcome_stats``, ...)
need only the ledger, so the command line's read commands never import LangGraph.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stageline.runner._reads import pending_waits, waiting_on
    from stageline.runner._retention import PRUNED_BY_DEFAULT, PruneReport
    from stageline.runner._runner import Runner, RunSummary, new_run_id
    from stageline.runner._stats import outcome_stats, parse_since, percentile

_LAZY = {
    "PRUNED_BY_DEFAULT": "stageline.runner._retention",
    "PruneReport": "stageline.runner._retention",
    "RunSummary": "stageline.runner._runner",
    "Runner": "stageline.runner._runner",
    "new_run_id": "stageline.runner._runner",
    "outcome_stats": "stageline.runner._stats",
    "parse_since": "stageline.runner._stats",
    "pending_waits": "stageline.runner._reads",
    "percentile": "stageline.runner._stats",
    "waiting_on": "stageline.runner._reads",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stageline.runner' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "PRUNED_BY_DEFAULT",
    "PruneReport",
    "RunSummary",
    "Runner",
    "new_run_id",
    "outcome_stats",
    "parse_since",
    "pending_waits",
    "percentile",
    "waiting_on",
]
