"""Fixtures of the acceptance tests: a real ``stageline serve`` (see tests/server_fixtures.py)."""

from __future__ import annotations

from server_fixtures import serve_project, server  # noqa: F401 (fixtures)
