"""What an operation keeps between its passes: the provider session, and a budget stop.

One small JSON file a node under the run folder (``sessions/NODE.json``), written as soon as
the agent names its session, so a retry, a resume after a crash or the replay after a budget
gate continues the agent's own session (``claude --resume``, ``codex exec resume``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

__all__ = ["CONTINUE_PROMPT", "SessionFile", "continue_prompt"]

SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
"""What a session id may look like: it goes on the agent's command line, so nothing that could
pass for an option (``--...``) or hold a space."""

CONTINUE_PROMPT = (
    "You were stopped before you finished. Continue the task where you left off; do not "
    "redo what is already done.\n\nThe task was:\n\n"
)


def continue_prompt(prompt: str) -> str:
    """The prompt that continues a resumed session."""
    return CONTINUE_PROMPT + prompt


class SessionFile:
    """``RUN_DIR/sessions/NODE.json``: ``session_id``, ``harness``, ``done``, ``budget_stops``."""

    def __init__(self, run_dir: Path, node: str) -> None:
        self.path = run_dir / "sessions" / f"{node}.json"

    def read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def update(self, **values: Any) -> None:
        data = {**self.read(), **values}
        data = {k: v for k, v in data.items() if v is not None}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, default=str), encoding="utf-8")
        os.replace(tmp, self.path)

    def session(self, harness: str) -> str | None:
        """The session to continue, if the same harness recorded one."""
        data = self.read()
        found = data.get("session_id")
        if not isinstance(found, str) or not SESSION_ID.fullmatch(found):
            return None
        return found if data.get("harness") == harness else None

    def budget_stops(self, attempt: int) -> list[dict[str, Any]]:
        """The budget stops of this run attempt so far, in order (each gate's limit, spend)."""
        found = self.read().get("budget_stops")
        if not isinstance(found, dict) or found.get("attempt") != attempt:
            return []
        return [s for s in found.get("stops") or [] if isinstance(s, dict)]
