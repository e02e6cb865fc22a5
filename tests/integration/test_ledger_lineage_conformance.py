"""Lineage rows on every ledger backend (``BACKEND_URLS``), the in-memory double included."""

from __future__ import annotations

import uuid

import pytest

from stageline.errors import InvalidTransition, RunNotFound
from stageline.ledger import Backend, Event, LedgerStore, Lineage, Run, RunStatus


def uid(prefix: str = "r") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _run(run_id: str) -> Run:
    return Run(run_id=run_id, template="t", template_version="1", status=RunStatus.QUEUED)


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


async def test_a_fork_is_created_with_its_lineage_and_listed_under_its_parent(
    ledger: LedgerStore,
) -> None:
    parent, first, second = uid("p"), uid("f"), uid("f")
    await ledger.create_run(_run(parent))
    assert await ledger.lineage(parent) is None and await ledger.forks(parent) == []
    one = Lineage(run_id=first, parent_run_id=parent, parent_step=3, parent_checkpoint_id="c3",
                  created_at=100.0)
    two = Lineage(run_id=second, parent_run_id=parent, parent_step=None,
                  parent_checkpoint_id="c0", created_at=200.0)
    await ledger.create_run(_run(second), lineage=two,
                            events=[Event(run_id=second, kind="run.forked")])
    await ledger.create_run(_run(first), lineage=one)
    assert await ledger.lineage(first) == one
    assert await ledger.lineage(second) == two
    assert await ledger.forks(parent) == [one, two]  # oldest first
    assert [e.kind for e in await ledger.events(second)] == ["run.forked"]


async def test_a_refused_run_leaves_no_lineage_and_deleting_a_run_drops_its_own(
    ledger: LedgerStore,
) -> None:
    parent, child = uid("p"), uid("c")
    await ledger.create_run(_run(parent))
    with pytest.raises(InvalidTransition):  # the id is taken: nothing of the fork is kept
        await ledger.create_run(_run(parent), lineage=Lineage(
            run_id=parent, parent_run_id=child, parent_step=1, parent_checkpoint_id="x"))
    assert await ledger.lineage(parent) is None and await ledger.forks(child) == []

    row = Lineage(run_id=child, parent_run_id=parent, parent_step=2, parent_checkpoint_id="c")
    await ledger.create_run(_run(child), lineage=row)
    await ledger.delete_run(parent)  # the fork keeps naming where it came from
    assert await ledger.lineage(child) == row
    await ledger.delete_run(child)
    assert await ledger.lineage(child) is None and await ledger.forks(parent) == []
    with pytest.raises(RunNotFound):
        await ledger.get_run(child)
