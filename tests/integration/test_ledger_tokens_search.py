"""API tokens and run search, on every ledger backend (memory, SQLite, Postgres)."""

from __future__ import annotations

import uuid

import pytest

from stageline.errors import ConflictError, InputError
from stageline.ledger import (
    Backend,
    Run,
    RunQuery,
    RunStatus,
    Scope,
    hash_token,
    new_token,
)


async def test_a_token_is_found_by_its_secret_only_while_active(backend: Backend) -> None:
    ledger = backend.ledger
    name = f"bot-{uuid.uuid4().hex[:6]}"
    secret = new_token()
    await ledger.create_token(name, "decide", hash_token(secret))
    assert await ledger.has_tokens()
    found = await ledger.authenticate(secret)
    assert found is not None and (found.name, found.scope) == (name, Scope.DECIDE)
    assert await ledger.authenticate(secret[:-1]) is None
    assert await ledger.authenticate("") is None
    assert secret not in repr(await ledger.tokens())  # only the hash is kept
    with pytest.raises(ConflictError):
        await ledger.create_token(name, "read", hash_token(new_token()))
    assert await ledger.revoke_token(name)
    assert not await ledger.revoke_token(name)
    assert await ledger.authenticate(secret) is None
    again = new_token()
    await ledger.create_token(name, "admin", hash_token(again))  # a revoked name is free again
    assert (await ledger.authenticate(again)).scope is Scope.ADMIN  # type: ignore[union-attr]
    assert await ledger.authenticate(secret) is None


async def test_token_names_are_checked(backend: Backend) -> None:
    for bad in ("", "a b", "../x", "-x", "x" * 65):
        with pytest.raises(InputError):
            await backend.ledger.create_token(bad, "read", hash_token(new_token()))


def test_scopes_are_ordered() -> None:
    assert Scope.ADMIN.allows("decide") and Scope.ADMIN.allows(Scope.READ)
    assert Scope.DECIDE.allows("read") and not Scope.DECIDE.allows("admin")
    assert not Scope.READ.allows("decide") and Scope.READ.allows("read")


async def _runs(backend: Backend, tag: str) -> list[Run]:
    made = []
    for i, status in enumerate(
        [
            RunStatus.QUEUED,
            RunStatus.WAITING,
            RunStatus.SUCCEEDED,
            RunStatus.FAILED,
            RunStatus.WAITING,
        ]
    ):
        run = Run(
            run_id=f"{tag}-{i}",
            template=f"tpl-{tag}" if i % 2 else f"other-{tag}",
            template_version="1",
            status=status,
            created_at=1000.0 + i,
            inputs={"topic": f"Topic {i} of 100%_{tag}"},
        )
        made.append(await backend.ledger.create_run(run))
    return made


async def test_runs_are_searched_and_paged(backend: Backend) -> None:
    tag = uuid.uuid4().hex[:8]
    made = await _runs(backend, tag)
    search = backend.ledger.search_runs

    async def ids(**query: object) -> list[str]:
        page = await search(RunQuery(text=tag, **query))  # type: ignore[arg-type]
        return [r.run_id for r in page.runs]

    newest_first = [r.run_id for r in reversed(made)]
    assert await ids() == newest_first
    assert await ids(statuses=["waiting", "failed"]) == [f"{tag}-4", f"{tag}-3", f"{tag}-1"]
    assert await ids(template=f"tpl-{tag}") == [f"{tag}-3", f"{tag}-1"]
    assert await ids(since=1001.0, until=1003.0) == [f"{tag}-2", f"{tag}-1"]
    assert [r.run_id for r in (await search(RunQuery(text=f"TOPIC 2 OF 100%_{tag}"))).runs] == [
        f"{tag}-2"
    ]
    assert (await search(RunQuery(text=f"Topic 2 of 100x_{tag}"))).runs == []  # % _ literal
    seen, cursor = [], None
    while True:
        page = await search(RunQuery(text=tag, limit=2, cursor=cursor))
        seen += [r.run_id for r in page.runs]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == newest_first
    assert await ids(limit=2, offset=2) == newest_first[2:4]
    with pytest.raises(InputError):
        await search(RunQuery(cursor="not-a-cursor"))
    with pytest.raises(InputError):
        await search(RunQuery(limit=0))
