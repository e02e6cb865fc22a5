"""State keys stageline reserves for itself: a leaf module, so readers need no LangGraph."""

from __future__ import annotations

__all__ = ["GATES_KEY", "LOOPS_KEY", "RESERVED_KEYS"]

LOOPS_KEY = "stageline_loops"
"""Reserved state key: how many times each declared loop's head has run."""
GATES_KEY = "stageline_gates"
"""Reserved state key: the last decision each gate took (routes read it)."""
RESERVED_KEYS = (LOOPS_KEY, GATES_KEY)
