"""The harness interface: requests, normalized events, results, and the ``Harness`` protocol."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "DEFAULT_ENV_ALLOWLIST",
    "Harness",
    "HarnessEvent",
    "HarnessEventKind",
    "HarnessRequest",
    "HarnessResult",
    "HarnessStatus",
    "allowed_env",
    "closing_stream",
]

DEFAULT_ENV_ALLOWLIST: tuple[str, ...] = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TERM",
    "TMPDIR",
    "USER",
)
"""Variables a harness subprocess sees unless the request names others; secrets are opt-in."""


class HarnessEventKind(StrEnum):
    TEXT_DELTA = "text_delta"  # a piece of streamed text; shown live, never stored
    MESSAGE = "message"  # a complete assistant message
    REASONING = "reasoning"  # the agent's visible reasoning
    TOOL_USE = "tool_use"  # the agent called a tool (shell, file edit, search, ...)
    TOOL_RESULT = "tool_result"  # what a tool call returned
    TOOL_SUMMARY = "tool_summary"  # a summary of several tool calls
    USAGE = "usage"  # tokens (and cost) spent
    PROVIDER_SESSION = "provider_session"  # the provider's session or thread id
    WARNING = "warning"  # something odd but not fatal (a malformed line, a non-fatal error)
    HELPER_AGENT = "helper_agent"  # activity of a sub-agent the agent started
    ERROR = "error"  # the harness or provider reported an error
    FILE_CHANGE = "file_change"  # the agent changed files
    STATUS = "status"  # progress: turn started, plan updated, rate limit state
    RESULT = "result"  # the agent's own final report: status, summary, output


@dataclass(frozen=True, kw_only=True)
class HarnessEvent:
    """One normalized fact from a harness run; ``kind`` is usually a ``HarnessEventKind``."""

    kind: str
    text: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    ts: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {"type": str(self.kind), "text": self.text, "data": dict(self.data), "ts": self.ts}


class HarnessStatus(StrEnum):
    SUCCEEDED = "succeeded"  # the agent finished and reported no failure
    FAILED = "failed"  # non-zero exit, or the agent or provider reported a failure
    TIMED_OUT = "timed_out"  # killed at the request's timeout


@dataclass(frozen=True, kw_only=True)
class HarnessResult:
    """How a harness run ended; always the last item a harness yields."""

    status: HarnessStatus
    output_text: str = ""
    summary: str = ""
    usage: Mapping[str, float] = field(default_factory=dict)
    """``input_tokens`` (cached ones included), ``cached_input_tokens``, ``output_tokens``,
    ``cost`` (US dollars) and any other numbers the agent reported."""
    exit_code: int | None = None
    stderr: str = ""
    """The tail of the agent's standard error, kept for diagnosis."""
    error: str | None = None
    session_id: str | None = None
    """The provider's session (Claude ``session_id``, Codex ``thread_id``), to resume it."""

    @property
    def ok(self) -> bool:
        return self.status is HarnessStatus.SUCCEEDED

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "harness.result",
            "status": str(self.status),
            "summary": self.summary,
            "output_text": self.output_text,
            "usage": dict(self.usage),
            "exit_code": self.exit_code,
            "stderr": self.stderr,
            "error": self.error,
            "session_id": self.session_id,
        }


@dataclass(frozen=True, kw_only=True)
class HarnessRequest:
    """What to run: built only by the operation runner, from a template's prompt."""

    kind: str
    model: str | None
    repo_root: Path
    prompt: str
    title: str | None = None
    timeout: float | None = 600.0
    env_allowlist: Sequence[str] = DEFAULT_ENV_ALLOWLIST
    options: Mapping[str, Any] = field(default_factory=dict)
    """Adapter-specific extras, e.g. the scripted harness's ``script``."""


class Harness(Protocol):
    """Runs an agent over a repository and yields normalized events, then one result."""

    kind: str

    async def ensure_ready(self, request: HarnessRequest, **future_kwargs: Any) -> None:
        """Raise ``HarnessNotReady`` unless the agent can run here (binary, environment, model)."""
        ...

    def run(
        self, request: HarnessRequest, **future_kwargs: Any
    ) -> AsyncIterator[HarnessEvent | HarnessResult]:
        """Events as they happen, ending with exactly one ``HarnessResult``."""
        ...


@contextlib.asynccontextmanager
async def closing_stream(
    stream: AsyncIterator[HarnessEvent | HarnessResult],
) -> AsyncIterator[AsyncIterator[HarnessEvent | HarnessResult]]:
    """``stream``, closed on exit when it can be (an async generator stops its agent then)."""
    try:
        yield stream
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


def allowed_env(
    allowlist: Sequence[str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The subset of the environment a harness subprocess may see."""
    source = os.environ if environ is None else environ
    return {name: source[name] for name in allowlist if name in source}
