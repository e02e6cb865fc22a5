"""The runner: one execution path for the CLI, the API, workers and Python callers."""

from stageline.runner._runner import Runner, RunSummary, new_run_id

__all__ = ["RunSummary", "Runner", "new_run_id"]
