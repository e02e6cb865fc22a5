"""Harnesses: run an agent over a repository and yield normalized events, then a result.

Kinds: ``command`` (a CLI coding agent as a subprocess: Claude Code, Codex, or any agent
speaking the generic JSON-lines format), ``chat`` (a LangChain chat model, streamed) and
``scripted`` (a subprocess replaying a script; the offline default and the test double).
"""

from stageline.harnesses._chat import ChatHarness
from stageline.harnesses._command import CommandHarness
from stageline.harnesses._parsers import PARSERS, StreamParser, parse_lines
from stageline.harnesses._registry import (
    COMMAND_PRESETS,
    HARNESSES,
    make_harness,
    register_harness,
)
from stageline.harnesses._scripted import ScriptedHarness
from stageline.harnesses._types import (
    DEFAULT_ENV_ALLOWLIST,
    Harness,
    HarnessEvent,
    HarnessEventKind,
    HarnessRequest,
    HarnessResult,
    HarnessStatus,
    allowed_env,
    closing_stream,
)

__all__ = [
    "COMMAND_PRESETS",
    "DEFAULT_ENV_ALLOWLIST",
    "HARNESSES",
    "PARSERS",
    "ChatHarness",
    "CommandHarness",
    "Harness",
    "HarnessEvent",
    "HarnessEventKind",
    "HarnessRequest",
    "HarnessResult",
    "HarnessStatus",
    "ScriptedHarness",
    "StreamParser",
    "allowed_env",
    "closing_stream",
    "make_harness",
    "parse_lines",
    "register_harness",
]
