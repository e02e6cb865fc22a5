"""The runner: one execution path for the CLI, the API, workers and Python callers.

Names are imported on first use: the read helpers (``pending_waits``, ``outcome_stats``, ...)
need only the ledger, so the command line's read commands never import LangGraph.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stageline.runner._client import Client, connect
    from stageline.runner._forge import ForgeAccess
    from stageline.runner._graph_context import run_context, with_context
    from stageline.runner._interrupts import check_inbox_answer
    from stageline.runner._live import GRAPH_MODES, LiveStream, live_stream
    from stageline.runner._reads import pending_waits, waiting_on
    from stageline.runner._retention import PRUNED_BY_DEFAULT, PruneReport
    from stageline.runner._runner import Runner, RunSummary, new_run_id
    from stageline.runner._services import open_services
    from stageline.runner._snapshots import CheckpointInfo
    from stageline.runner._stats import outcome_stats, parse_since, percentile
    from stageline.runner._wait_pick import ci_wait_refused

_LAZY = {
    "Client": "stageline.runner._client",
    "connect": "stageline.runner._client",
    "ForgeAccess": "stageline.runner._forge",
    "CheckpointInfo": "stageline.runner._snapshots",
    "GRAPH_MODES": "stageline.runner._live",
    "LiveStream": "stageline.runner._live",
    "live_stream": "stageline.runner._live",
    "check_inbox_answer": "stageline.runner._interrupts",
    "ci_wait_refused": "stageline.runner._wait_pick",
    "open_services": "stageline.runner._services",
    "PRUNED_BY_DEFAULT": "stageline.runner._retention",
    "PruneReport": "stageline.runner._retention",
    "RunSummary": "stageline.runner._runner",
    "Runner": "stageline.runner._runner",
    "new_run_id": "stageline.runner._runner",
    "outcome_stats": "stageline.runner._stats",
    "parse_since": "stageline.runner._stats",
    "pending_waits": "stageline.runner._reads",
    "run_context": "stageline.runner._graph_context",
    "with_context": "stageline.runner._graph_context",
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
    "GRAPH_MODES",
    "PRUNED_BY_DEFAULT",
    "CheckpointInfo",
    "Client",
    "ForgeAccess",
    "LiveStream",
    "PruneReport",
    "RunSummary",
    "Runner",
    "check_inbox_answer",
    "ci_wait_refused",
    "connect",
    "live_stream",
    "new_run_id",
    "open_services",
    "outcome_stats",
    "parse_since",
    "pending_waits",
    "percentile",
    "run_context",
    "waiting_on",
    "with_context",
]
