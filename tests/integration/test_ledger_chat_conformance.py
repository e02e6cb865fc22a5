"""What two-way chat keeps in the ledger, on every backend (memory, SQLite, Postgres)."""

from __future__ import annotations

import uuid

from stageline.ledger import Backend


async def test_messages_are_kept_once_per_key_and_a_thread_finds_its_run(backend: Backend) -> None:
    ledger = backend.ledger
    run_id = f"r{uuid.uuid4().hex[:10]}"
    assert await ledger.chat_message(run_id, "root") is None
    await ledger.save_chat_message(run_id, "root", "C1", "100.1")
    await ledger.save_chat_message(run_id, "root", "C1", "200.2")  # the first one stays
    await ledger.save_chat_message(run_id, "wait:w1:1", "C1", "100.2")
    root = await ledger.chat_message(run_id, "root")
    assert root is not None and (root.channel, root.ts) == ("C1", "100.1")
    assert await ledger.chat_thread_run("C1", "100.1") == run_id
    assert await ledger.chat_thread_run("C1", "100.2") is None  # not a thread's root
    assert await ledger.chat_thread_run("C2", "100.1") is None


async def test_a_key_is_used_once(backend: Backend) -> None:
    key = f"slack-event:{uuid.uuid4().hex}"
    assert await backend.ledger.chat_once(key)
    assert not await backend.ledger.chat_once(key)
    assert await backend.ledger.chat_once(key + "x")


async def test_a_secret_is_made_once_and_kept(backend: Backend) -> None:
    first = await backend.ledger.chat_secret("decision_links")
    assert len(first) >= 40
    assert await backend.ledger.chat_secret("decision_links") == first
    assert await backend.ledger.chat_secret("other") != first
