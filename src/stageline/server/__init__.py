"""``stageline serve``: the HTTP API, the dashboard and chat, as views over the one runner."""

from __future__ import annotations

__all__: list[str] = []
