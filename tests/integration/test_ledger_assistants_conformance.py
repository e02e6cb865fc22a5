"""LangGraph assistants and their versions on every ledger backend (SQLite, Postgres, memory)."""

from __future__ import annotations

import uuid

import pytest

from stageline.errors import InvalidTransition
from stageline.ledger import Assistant, AssistantNotFound, Backend, LedgerStore


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


def made(**fields: object) -> Assistant:
    base: dict[str, object] = {
        "assistant_id": str(uuid.uuid4()),
        "graph_id": "blog_post",
        "name": "Short posts",
        "context": {"tone": "dry"},
        "metadata": {"team": "docs", "n": 1},
    }
    return Assistant(**{**base, **fields})  # type: ignore[arg-type]


async def test_an_assistant_is_kept_once_and_updates_write_versions(ledger: LedgerStore) -> None:
    first = await ledger.put_assistant(made(description="one"))
    assert first.version == 1 and await ledger.assistant(first.assistant_id) == first
    with pytest.raises(InvalidTransition, match="already exists"):
        await ledger.put_assistant(made(assistant_id=first.assistant_id))
    same = await ledger.put_assistant(
        made(assistant_id=first.assistant_id, name="other"), if_exists="do_nothing"
    )
    assert same == first
    second = await ledger.update_assistant(
        first.assistant_id, {"context": {"tone": "warm"}, "metadata": {"n": 2}}
    )
    assert (second.version, second.context, second.name) == (2, {"tone": "warm"}, "Short posts")
    assert second.created_at == first.created_at and await ledger.assistant(first.assistant_id) == (
        second
    )
    versions = await ledger.assistant_versions(first.assistant_id)
    assert [(v.version, v.context) for v in versions] == [
        (2, {"tone": "warm"}),
        (1, {"tone": "dry"}),
    ]
    back = await ledger.set_latest_assistant(first.assistant_id, 1)
    assert (back.version, back.context, back.description) == (1, {"tone": "dry"}, "one")
    third = await ledger.update_assistant(first.assistant_id, {"name": "renamed"})
    assert third.version == 3 and third.context == {"tone": "dry"}  # the next after the highest
    with pytest.raises(AssistantNotFound, match="no version 9"):
        await ledger.set_latest_assistant(first.assistant_id, 9)


async def test_assistants_are_listed_by_template_and_deleted_with_their_versions(
    ledger: LedgerStore,
) -> None:
    a = await ledger.put_assistant(made(created_at=10.0))
    b = await ledger.put_assistant(made(graph_id="code_change", created_at=20.0))
    ids = [x.assistant_id for x in await ledger.assistants()]
    assert ids.index(a.assistant_id) < ids.index(b.assistant_id)
    assert b.assistant_id not in [x.assistant_id for x in await ledger.assistants("blog_post")]
    assert await ledger.delete_assistant(a.assistant_id) is True
    assert await ledger.assistant(a.assistant_id) is None
    assert await ledger.assistant_versions(a.assistant_id) == []
    assert await ledger.delete_assistant(a.assistant_id) is False
    for missing in (
        ledger.update_assistant(a.assistant_id, {"name": "x"}),
        ledger.set_latest_assistant(a.assistant_id, 1),
    ):
        with pytest.raises(AssistantNotFound, match="not found"):
            await missing
