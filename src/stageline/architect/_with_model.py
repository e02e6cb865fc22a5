"""Composing with a model: a run of the built-in ``compose`` template, through the runner."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from stageline.runner import Runner

if TYPE_CHECKING:
    from stageline.config import Settings
    from stageline.llm import ChatModel
    from stageline.runner import RunSummary
    from stageline.templates import CatalogEntry

__all__ = ["compose_with_model"]


async def compose_with_model(
    goal: str,
    catalog: Sequence[CatalogEntry],
    *,
    target: Path,
    model: ChatModel,
    settings: Settings,
    approve: bool = False,
) -> RunSummary:
    """A run of ``compose``: ``model`` drafts, every draft is checked, the errors go back to
    it; it ends with the file written, waiting at the approval gate, or failed."""
    inputs = {
        "goal": goal,
        "target": str(target),
        "catalog": [e.to_dict() for e in catalog if e.composable],
        "approve": approve,
    }
    async with Runner.open(settings, model=model) as runner:
        return await runner.start("compose", inputs)
