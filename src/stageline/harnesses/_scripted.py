"""The ``scripted`` harness: a real subprocess replaying a script; offline default, test double."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from stageline.errors import HarnessNotReady
from stageline.harnesses import _scripted_agent
from stageline.harnesses._command import CommandHarness
from stageline.harnesses._types import (
    HarnessEvent,
    HarnessRequest,
    HarnessResult,
    closing_stream,
)

__all__ = ["ScriptedHarness"]

AGENT = Path(_scripted_agent.__file__)


class ScriptedHarness:
    """Replays ``script`` (or the request's ``options["script"]``) as a subprocess in the repo.

    The script's steps are those of ``stageline.harnesses._scripted_agent``: events printed as
    generic JSON lines, and file edits really made in the repository, so everything after the
    harness (transcripts, indexing, validation) sees what a real agent would leave.

    A script usually comes from a run's inputs, so it may not start processes: a ``spawn``
    step is refused unless the code that makes the harness says ``allow_spawn=True``.
    """

    kind = "scripted"

    def __init__(
        self,
        script: Sequence[Mapping[str, Any]] | None = None,
        *,
        allow_spawn: bool = False,
        **future_kwargs: Any,
    ) -> None:
        self.script = list(script) if script is not None else None
        self.allow_spawn = allow_spawn

    def _script(self, request: HarnessRequest) -> list[dict[str, Any]]:
        script = self.script if self.script is not None else request.options.get("script")
        if script is None:
            raise HarnessNotReady("the scripted harness has no script (pass `script`)")
        try:
            return _scripted_agent.steps_of(script, allow_spawn=self.allow_spawn)
        except ValueError as exc:
            raise HarnessNotReady(f"the scripted harness's script is invalid: {exc}") from exc

    def _command(self, script_path: Path) -> CommandHarness:
        # Run by file path: the agent needs only the standard library, not stageline on PATH.
        flags = ["--allow-spawn"] if self.allow_spawn else []
        return CommandHarness(
            [sys.executable, "-u", str(AGENT), *flags, str(script_path)], fmt="generic"
        )

    async def ensure_ready(self, request: HarnessRequest, **future_kwargs: Any) -> None:
        self._script(request)
        if not Path(request.repo_root).is_dir():
            raise HarnessNotReady(f"repository {request.repo_root} is not a folder")

    async def run(
        self, request: HarnessRequest, **future_kwargs: Any
    ) -> AsyncIterator[HarnessEvent | HarnessResult]:
        steps = self._script(request)
        with tempfile.TemporaryDirectory(prefix="stageline-script-") as folder:
            path = Path(folder) / "script.json"
            path.write_text(json.dumps(steps), encoding="utf-8")
            async with closing_stream(self._command(path).run(request)) as items:
                async for item in items:
                    yield item
