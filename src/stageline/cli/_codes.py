"""Exit codes of the ``stageline`` command, in one place."""

from __future__ import annotations

from stageline.ledger import RunStatus

__all__ = [
    "EPILOG",
    "EXIT_CONFLICT",
    "EXIT_DECIDED",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PARKED",
    "EXIT_RUN_FAILED",
    "EXIT_STORAGE",
    "EXIT_USAGE",
    "EXIT_WAITING",
    "exit_code_for",
]

EXIT_OK = 0
"""The run succeeded, or the command did what it was asked."""
EXIT_RUN_FAILED = 1
"""The run failed, was cancelled or rejected, or was drained before it ended."""
EXIT_USAGE = 2
"""Bad arguments or input, unknown template or run, invalid template (``UsageError``)."""
EXIT_WAITING = 3
"""The run is waiting for a person (a gate or a question)."""
EXIT_PARKED = 7
"""The run is parked: out of rounds (plan reviews, builds); a person decides what next."""
EXIT_CONFLICT = 4
"""The request clashes with the run's state (``LeaseHeld``, ``TemplateChanged``, ...)."""
EXIT_DECIDED = 5
"""Someone else decided the gate or answered the question first (``AlreadyDecided``)."""
EXIT_STORAGE = 6
"""The database is unreachable or broken (``StorageError``)."""
EXIT_INTERNAL = 70
"""A bug: an exception stageline did not raise on purpose."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C)."""

_BY_STATUS = {
    RunStatus.SUCCEEDED: EXIT_OK,
    RunStatus.WAITING: EXIT_WAITING,
    RunStatus.FAILED: EXIT_RUN_FAILED,
    RunStatus.CANCELLED: EXIT_RUN_FAILED,
    RunStatus.REJECTED: EXIT_RUN_FAILED,
    RunStatus.PARKED: EXIT_PARKED,
    RunStatus.TAKEN_OVER: EXIT_OK,  # a person's decision: the work is theirs now
}


def exit_code_for(status: RunStatus) -> int:
    """What a command that advanced a run exits with, given where the run stopped."""
    return _BY_STATUS.get(status, EXIT_RUN_FAILED)


EPILOG = f"""\
\b
Exit codes:
  {EXIT_OK}    the run succeeded / the command did what it was asked
  {EXIT_RUN_FAILED}    the run failed, was cancelled or rejected
  {EXIT_USAGE}    usage or input error: bad arguments, unknown template or run, invalid template
  {EXIT_WAITING}    the run is waiting for a person (a gate or a question)
  {EXIT_PARKED}    the run is parked: out of rounds; a person grants more, takes over or rejects
  {EXIT_CONFLICT}    conflict: another process holds the run, the template changed, or the
       run's status does not allow this, or a decision is stale
  {EXIT_DECIDED}    already decided: someone else decided the gate or answered the question
       first; theirs stands and yours was not recorded
  {EXIT_STORAGE}    storage error: the database is unreachable or broken
  {EXIT_INTERNAL}   internal error (rerun with STAGELINE_DEBUG=1 for the traceback)
  {EXIT_INTERRUPTED}  interrupted
"""
