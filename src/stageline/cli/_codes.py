"""Exit codes of the ``stageline`` command, in one place."""

from __future__ import annotations

from stageline.ledger import RunStatus

__all__ = [
    "ADVANCE_EPILOG",
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
    "NOT_AN_ENDING",
    "TABLE",
    "exit_code_for",
]

EXIT_OK = 0
"""The run succeeded (or was taken over), or the command did what it was asked."""
EXIT_RUN_FAILED = 1
"""The run failed, was cancelled or rejected, or was queued again before it ended."""
EXIT_USAGE = 2
"""Bad arguments or input, unknown template or run, invalid template (``UsageError``)."""
EXIT_WAITING = 3
"""The run is waiting for a person (a gate or a question)."""
EXIT_PARKED = 7
"""The run is parked: out of rounds (plan reviews, builds) or past a deadline whose policy
parks; a person decides what next."""
EXIT_CONFLICT = 4
"""The request clashes with the run's state (``LeaseHeld``, ``TemplateChanged``, ...)."""
EXIT_DECIDED = 5
"""Someone else decided the gate or answered the question first (``AlreadyDecided``)."""
EXIT_STORAGE = 6
"""The database is unreachable or broken (``StorageError``), or GitHub refused a call or could
not be reached (``ForgeError``)."""
EXIT_INTERNAL = 70
"""A bug: an exception stageline did not raise on purpose."""
EXIT_INTERRUPTED = 130
"""Ctrl-C or SIGTERM stopped the command; the run it advanced is ``stopped``."""

_BY_STATUS = {
    RunStatus.SUCCEEDED: EXIT_OK,
    RunStatus.TAKEN_OVER: EXIT_OK,  # a person's decision: the work is theirs now
    RunStatus.WAITING: EXIT_WAITING,
    RunStatus.PARKED: EXIT_PARKED,
    RunStatus.FAILED: EXIT_RUN_FAILED,
    RunStatus.CANCELLED: EXIT_RUN_FAILED,
    RunStatus.REJECTED: EXIT_RUN_FAILED,
    RunStatus.QUEUED: EXIT_RUN_FAILED,  # drained: it did not end here
    RunStatus.RUNNING: EXIT_RUN_FAILED,  # another process advances it: it did not end here
    RunStatus.STOPPED: EXIT_INTERRUPTED,
}
NOT_AN_ENDING = (RunStatus.QUEUED, RunStatus.RUNNING)
"""Statuses a command that advanced a run does not see it end in (a foreground run is never
drained); mapped all the same, so every status has a code."""


def exit_code_for(status: RunStatus) -> int:
    """What a command that advanced a run exits with, given where the run stopped: ``run``,
    ``resume``, ``retry``, ``approve``, ``reject``, ``changes``, ``takeover`` and ``answer``
    alike (a rejected run exits 1 whoever rejected it)."""
    return _BY_STATUS[status]


TABLE = (
    (
        EXIT_OK,
        "ok: the run succeeded or was taken over; a command that does not advance a run did "
        "what it was asked",
    ),
    (
        EXIT_RUN_FAILED,
        "the run failed, was cancelled or rejected (`reject` too: a command that "
        "advances a run exits by where the run stopped)",
    ),
    (
        EXIT_USAGE,
        "usage or input error: bad arguments, unknown template or run, invalid "
        "template, a missing required input; nothing is created",
    ),
    (EXIT_WAITING, "the run is waiting for a person (a gate or a question)"),
    (
        EXIT_CONFLICT,
        "conflict: another process holds the run, the template changed since "
        "(--force overrides), the run's status does not allow this, or a decision is stale",
    ),
    (
        EXIT_DECIDED,
        "already decided: someone else decided the gate or answered the question "
        "first; theirs stands and yours was not recorded",
    ),
    (
        EXIT_STORAGE,
        "storage error: the database is unreachable or broken (or GitHub, for `stageline github`)",
    ),
    (EXIT_PARKED, "the run is parked: out of rounds; a person grants more, takes over or rejects"),
    (EXIT_INTERNAL, "internal error (rerun with STAGELINE_DEBUG=1 for the traceback)"),
    (
        EXIT_INTERRUPTED,
        "interrupted: Ctrl-C or SIGTERM; the run is stopped and "
        "`stageline resume RUN` continues it",
    ),
)
"""Every exit code and what it means: ``--help`` prints it, the README lists the same."""


def _epilog() -> str:
    import textwrap

    lines = ["\b", "Exit codes:"]
    for code, meaning in TABLE:
        wrapped = textwrap.wrap(meaning, 88)
        lines.append(f"  {code:<5}{wrapped[0]}")
        lines += [f"       {more}" for more in wrapped[1:]]
    return "\n".join(lines) + "\n"


EPILOG = _epilog()


def _advance_epilog() -> str:
    import textwrap

    by_code: dict[int, list[str]] = {}
    for status, code in _BY_STATUS.items():
        if status not in NOT_AN_ENDING:
            by_code.setdefault(code, []).append(str(status))
    stops = "; ".join(f"{code} {' or '.join(names)}" for code, names in sorted(by_code.items()))
    text = (
        f"Exits by where the run stopped: {stops}. Errors: {EXIT_USAGE} usage, {EXIT_CONFLICT} "
        f"conflict, {EXIT_DECIDED} already decided, {EXIT_STORAGE} storage, {EXIT_INTERNAL} "
        "internal (see `stageline --help`)."
    )
    return "\b\n" + "\n".join(textwrap.wrap(text, 92)) + "\n"


ADVANCE_EPILOG = _advance_epilog()
"""The epilog of every command that advances a run (run, resume, retry, the decisions)."""
