"""An assistant's config and context are kept equal, as LangGraph's server keeps them."""

from __future__ import annotations

import pytest
from fastapi import HTTPException

from stageline.ledger import Assistant
from stageline.server.langgraph._assistants import assistant_json, settings, version_json


def test_context_and_configurable_mirror_each_other_and_both_at_once_is_422() -> None:
    assert settings(None, {"a": 1}) == ({"configurable": {"a": 1}}, {"a": 1})
    assert settings({"configurable": {"a": 1}, "tags": ["x"]}, None) == (
        {"configurable": {"a": 1}, "tags": ["x"]},
        {"a": 1},
    )
    assert settings(None, None) == ({}, None)
    assert settings({"recursion_limit": 5}, {}) == ({"recursion_limit": 5}, {})
    for config, context in (({"configurable": {"a": 1}}, {"b": 2}), ({"configurable": 3}, None)):
        with pytest.raises(HTTPException) as bad:
            settings(config, context)
        assert bad.value.status_code == 422


def test_a_version_shows_when_it_was_written() -> None:
    made = Assistant(
        assistant_id="x", graph_id="g", name="n", version=2, created_at=1.0, updated_at=5.0
    )
    shown = assistant_json(made)
    assert (shown["created_at"], shown["updated_at"]) == (
        "1970-01-01T00:00:01+00:00",
        "1970-01-01T00:00:05+00:00",
    )
    assert version_json(made)["created_at"] == shown["updated_at"]
    assert "updated_at" not in version_json(made)
