"""Every error stageline raises on purpose, under one root.

```
StagelineError
├── UsageError                  exit 2, HTTP 400/404: the caller asked for something wrong
│   ├── ConfigError             stageline.toml or a STAGELINE_* variable is invalid
│   ├── InputError              a run input is malformed or cannot be checkpointed
│   ├── TemplateNotFound        no template by that name or path (lists the known ones)
│   ├── TemplateError           a template is invalid (names file and line)
│   ├── StageNotFound           a stage name or import path does not resolve
│   ├── RunNotFound             no run with that id
│   ├── AnswerInvalid           an answer does not fit its question (names the question)
│   ├── CannotCompose           a goal needs a capability no stage has (names the closest)
│   └── HarnessNotReady         a harness cannot run here (binary, environment or model missing)
├── ConflictError               exit 4, HTTP 409: the request clashes with the run's state
│   ├── LeaseHeld               another process is advancing the run (names the holder)
│   ├── TemplateChanged         the template changed since the run started (names both versions)
│   ├── InvalidTransition       e.g. retrying a run that succeeded
│   │   └── WaitsForPerson      a state write on a run that waits at a gate or question
│   ├── StaleDecision           a decision for another attempt or another state of the run
│   └── AlreadyDecided          exit 5: someone else decided the gate or answered first
├── StorageError                exit 6, HTTP 503: the database is unreachable or broken
│   └── CheckpointCorrupt       a checkpoint value is not what stageline wrote (names run, step)
├── ForgeError                  exit 6, HTTP 502: GitHub refused a call or could not be reached
└── RunError                    raised inside a run; recorded on the node, never as a traceback
    ├── LoopBoundExceeded       a loop went past its declared bound
    ├── FanInConflict           parallel stages wrote one key that has no reducer
    ├── UndeclaredWrite         a stage returned a state key outside the writes it declares
    ├── EffectInDoubt           a side effect started but its result was never recorded
    └── OperationFailed         a harness operation failed; carries its failure phase
```

Each class carries ``exit_code`` and ``http_status`` so the CLI and the API map errors the
same way.
"""

from __future__ import annotations

__all__ = [
    "AlreadyDecided",
    "AnswerInvalid",
    "CannotCompose",
    "CheckpointCorrupt",
    "ConfigError",
    "ConflictError",
    "EffectInDoubt",
    "FanInConflict",
    "ForgeError",
    "HarnessNotReady",
    "InputError",
    "InvalidTransition",
    "LeaseHeld",
    "LoopBoundExceeded",
    "OperationFailed",
    "RunError",
    "RunNotFound",
    "StageNotFound",
    "StagelineError",
    "StaleDecision",
    "StorageError",
    "TemplateChanged",
    "TemplateError",
    "TemplateNotFound",
    "UndeclaredWrite",
    "UsageError",
    "WaitsForPerson",
]


class StagelineError(Exception):
    """Root of every error stageline raises on purpose."""

    exit_code: int = 70
    http_status: int = 500


class UsageError(StagelineError):
    """The caller asked for something wrong; nothing was changed."""

    exit_code = 2
    http_status = 400


class ConfigError(UsageError):
    """Configuration (stageline.toml or STAGELINE_* variables) is invalid."""


class InputError(UsageError):
    """A run input is malformed or cannot be checkpointed."""


class TemplateNotFound(UsageError):
    """No template by that name or path."""

    http_status = 404

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        listing = ", ".join(known) if known else "(none)"
        super().__init__(f"unknown template {name!r}; known templates: {listing}")


class TemplateError(UsageError):
    """A template is invalid; the message names the file and line where it can."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None):
        self.source = source
        self.line = line
        self.reason = message
        where = ""
        if source is not None:
            where = f"{source}:{line}: " if line is not None else f"{source}: "
        super().__init__(f"{where}{message}")


class StageNotFound(UsageError):
    """A stage name or import path does not resolve."""


class RunNotFound(UsageError):
    """No run with that id."""

    http_status = 404

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no run with id {run_id!r} (see `stageline runs`)")


class HarnessNotReady(UsageError):
    """A harness cannot run here: its binary, a required variable or its model is missing."""


class ConflictError(StagelineError):
    """The request clashes with the run's current state."""

    exit_code = 4
    http_status = 409


class LeaseHeld(ConflictError):
    """Another live process holds the run's lease."""

    def __init__(self, run_id: str, holder: str, expires_at: str) -> None:
        self.run_id = run_id
        self.holder = holder
        super().__init__(
            f"run {run_id} is being advanced by {holder} (lease until {expires_at}); "
            "wait for it to finish or stop that process"
        )


class TemplateChanged(ConflictError):
    """The template changed since the run started."""

    def __init__(self, run_id: str, recorded: str, current: str) -> None:
        self.recorded = recorded
        self.current = current
        super().__init__(
            f"run {run_id} started on template version {recorded}, but the template is now "
            f"{current}; pass --force to resume it on the new version"
        )


class InvalidTransition(ConflictError):
    """The run is not in a state that allows this action."""


class WaitsForPerson(InvalidTransition):
    """A state write or resume that would move a run past a gate or question: only a recorded
    decision or answer does that (``route`` is where to make it)."""

    def __init__(self, message: str, *, run_id: str, kind: str, name: str, route: str) -> None:
        self.run_id = run_id
        self.kind = kind
        self.name = name
        self.route = route
        super().__init__(message)


class StaleDecision(ConflictError):
    """A decision made for another attempt of the run, or for a state that has changed since."""


class AlreadyDecided(ConflictError):
    """Someone else decided this gate, or answered this question, first: theirs stands."""

    exit_code = 5


class AnswerInvalid(UsageError):
    """An answer does not fit its question; nothing was recorded."""


class CannotCompose(UsageError):
    """A goal needs a capability no stage of the catalog has; nothing was composed."""

    def __init__(self, missing: list[str], closest: list[str], goal: str) -> None:
        self.missing, self.closest, self.goal = missing, closest, goal
        what = ", ".join(map(repr, dict.fromkeys(missing)))
        near = ", ".join(closest) or "none"
        super().__init__(
            f"cannot compose {goal!r}: it needs {what}, which no stage in the catalog provides "
            f"(closest stages: {near}); add a stage with that capability "
            "(@stage(capability=...)), or ask for what these do"
        )


class StorageError(StagelineError):
    """The database is unreachable, or setting it up failed."""

    exit_code = 6
    http_status = 503


class CheckpointCorrupt(StorageError):
    """A checkpoint value is not exactly what stageline wrote: a type off the allowlist, a
    pickle, a cut blob, a pending write nobody recorded. Nothing of it is revived or run."""

    def __init__(self, detail: str, *, run_id: str | None = None, step: str | None = None):
        self.detail, self.run_id, self.step = detail, run_id, step
        where = f"run {run_id}" if run_id else "a run"
        if step:
            where += f" at step {step!r}"
        super().__init__(
            f"the checkpoint of {where} cannot be trusted: {detail}; it was changed outside "
            "stageline (or is damaged), so the run is not advanced; restore the database from "
            "a backup, or cancel the run"
        )

    def of(self, run_id: str, step: str | None) -> CheckpointCorrupt:
        """The same error, naming the run and the step it stands at."""
        return CheckpointCorrupt(self.detail, run_id=run_id, step=step)


class ForgeError(StagelineError):
    """GitHub (the forge) refused a call or could not be reached: its status (None when no
    answer came) and GitHub's own message, never the token."""

    exit_code = 6
    http_status = 502

    def __init__(self, action: str, status: int | None, message: str) -> None:
        self.action, self.status, self.message = action, status, message
        said = f"HTTP {status}: {message}" if status is not None else message
        super().__init__(f"GitHub: {action} failed ({said})")


class RunError(StagelineError):
    """Raised inside a run; it fails the node and the run, and is recorded, not printed."""

    failure_phase: str = "stage"


class LoopBoundExceeded(RunError):
    """A loop went past its declared bound."""

    failure_phase = "loop_bound"

    def __init__(self, loop: str, bound: int) -> None:
        self.loop = loop
        self.bound = bound
        super().__init__(f"loop {loop!r} exceeded its bound of {bound} iterations")


class FanInConflict(RunError):
    """Parallel stages wrote one state key that has no reducer."""

    failure_phase = "fan_in"


class UndeclaredWrite(RunError):
    """A stage returned state keys outside the ``writes`` it declares (the catalog's word)."""

    failure_phase = "writes"

    def __init__(self, stage: str, extra: list[str], declared: tuple[str, ...]) -> None:
        self.stage, self.extra, self.declared = stage, extra, declared
        super().__init__(
            f"stage {stage!r} wrote {', '.join(map(repr, extra))}, which it does not declare "
            f"(writes: {', '.join(declared) or 'none'}); declare the key or stop writing it"
        )


class OperationFailed(RunError):
    """A harness operation failed in a named phase; the message is its one-line summary."""

    def __init__(self, summary: str, failure_phase: str = "internal_error") -> None:
        self.summary = summary
        self.failure_phase = failure_phase
        super().__init__(summary, failure_phase)

    def __str__(self) -> str:
        return self.summary


class EffectInDoubt(RunError):
    """A side effect started in an earlier execution but its result was never recorded."""

    failure_phase = "effect_in_doubt"

    def __init__(self, run_id: str, node: str, key: str, started_at: str) -> None:
        self.run_id, self.node, self.key = run_id, node, key
        super().__init__(
            f"effect {key!r} of node {node!r} started at {started_at} but its result was never "
            "recorded (the process stopped in between), so it may or may not have happened; "
            f"check by hand, then `stageline effect {run_id} {node} {key} --done` (it happened) "
            "or `--redo` (run it again), and retry the run"
        )
