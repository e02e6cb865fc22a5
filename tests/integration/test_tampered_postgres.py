"""Tampered checkpoint rows in a real Postgres database are refused (``CheckpointCorrupt``).

The SQLite file gets the same treatment through the CLI in ``test_tampered_checkpoints``.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import ormsgpack
import psycopg
import pytest
from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_POS_ARGS

from stageline.config import Settings
from stageline.errors import CheckpointCorrupt
from stageline.ledger import RunStatus
from stageline.runner import Runner
from stageline.templates import Template


class _S(TypedDict, total=False):
    draft: str
    feedback: str


async def _write(state: _S, ctx: Any) -> dict[str, Any]:
    return {"draft": "the real draft"}


def _template() -> Template:
    made = Template("tamper_pg", state=_S)
    made.add_stage("write", _write).add_gate("approval", changes_to="write")
    made.add_edge("write", "approval")
    return made


class _Boom:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


Tamper = Callable[[psycopg.Connection[Any], str, Path], None]


_LATEST = "(SELECT max(checkpoint_id) FROM stageline_checkpoints WHERE thread_id = %(run)s)"


def _set_channel(db: psycopg.Connection[Any], run_id: str, value: Any) -> None:
    """Replace a channel's value in the run's latest checkpoint, keeping the rest as stored."""
    keep: Any = lambda code, data: ormsgpack.Ext(code, data)  # noqa: E731
    (blob,) = db.execute(
        f"SELECT checkpoint FROM stageline_checkpoints WHERE checkpoint_id = {_LATEST}",
        {"run": run_id},
    ).fetchone() or (None,)
    checkpoint = ormsgpack.unpackb(blob, ext_hook=keep, option=ormsgpack.OPT_NON_STR_KEYS)
    checkpoint["channel_values"]["stageline_loops"] = value
    db.execute(
        f"UPDATE stageline_checkpoints SET checkpoint = %(blob)s WHERE checkpoint_id = {_LATEST}",
        {"run": run_id, "blob": ormsgpack.packb(checkpoint, option=ormsgpack.OPT_NON_STR_KEYS)},
    )


def off_allowlist(db: psycopg.Connection[Any], run_id: str, marker: Path) -> None:
    hostile = ormsgpack.Ext(
        EXT_CONSTRUCTOR_POS_ARGS, ormsgpack.packb(("os", "system", [f"touch {marker}"]))
    )
    _set_channel(db, run_id, hostile)


def pickled(db: psycopg.Connection[Any], run_id: str, marker: Path) -> None:
    db.execute(
        "UPDATE stageline_checkpoints SET type = 'pickle', checkpoint = %(blob)s "
        f"WHERE checkpoint_id = {_LATEST}",
        {"run": run_id, "blob": pickle.dumps(_Boom(marker))},
    )


def truncated(db: psycopg.Connection[Any], run_id: str, marker: Path) -> None:
    db.execute(
        "UPDATE stageline_checkpoints SET checkpoint = substring(checkpoint from 1 for "
        f"length(checkpoint) / 2) WHERE checkpoint_id = {_LATEST}",
        {"run": run_id},
    )


def injected_write(db: psycopg.Connection[Any], run_id: str, marker: Path) -> None:
    db.execute(
        "INSERT INTO stageline_checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, "
        "task_id, task_path, idx, channel, type, value) SELECT thread_id, checkpoint_ns, "
        "checkpoint_id, task_id, task_path, 9, 'draft', 'msgpack', %s FROM "
        "stageline_checkpoint_writes WHERE "
        "thread_id = %s AND channel = '__interrupt__'",
        (ormsgpack.packb("a draft nobody reviewed"), run_id),
    )


TAMPERINGS: dict[str, Tamper] = {
    f.__name__: f for f in (off_allowlist, pickled, truncated, injected_write)
}


@pytest.mark.parametrize("tamper", sorted(TAMPERINGS))
async def test_a_tampered_postgres_checkpoint_is_refused(
    tmp_path: Path, postgres_settings: Settings, postgres_url: str, tamper: str
) -> None:
    async with Runner.open(postgres_settings) as runner:
        run_id = (await runner.start(_template(), {})).run.run_id
    marker = tmp_path / "pwned"
    with psycopg.connect(postgres_url, autocommit=True) as db:
        TAMPERINGS[tamper](db, run_id, marker)
    async with Runner.open(postgres_settings) as runner:
        runner.load(_template())
        with pytest.raises(CheckpointCorrupt, match=f"run {run_id} at step 'approval'") as got:
            await runner.approve(run_id, actor="mallory")
        assert got.value.exit_code == 6
        with pytest.raises(CheckpointCorrupt):
            await runner.resume(run_id)
        shown = await runner.status(run_id)
        assert shown.status is RunStatus.WAITING
        assert shown.checkpoint_error and run_id in shown.checkpoint_error
        assert [w.status for w in shown.waits] == ["pending"]  # no decision recorded
    assert not marker.exists()
