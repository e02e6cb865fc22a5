"""The runner: one execution path for the CLI, the API, workers and Python callers."""

from stageline.runner._client import Client, connect
from stageline.runner._history import CheckpointInfo
from stageline.runner._retention import PRUNED_BY_DEFAULT, PruneReport
from stageline.runner._runner import Runner, RunSummary, new_run_id
from stageline.runner._services import open_services
from stageline.runner._stats import outcome_stats, parse_since, percentile

__all__ = [
    "PRUNED_BY_DEFAULT",
    "CheckpointInfo",
    "Client",
    "PruneReport",
    "RunSummary",
    "Runner",
    "connect",
    "new_run_id",
    "open_services",
    "outcome_stats",
    "parse_since",
    "percentile",
]
