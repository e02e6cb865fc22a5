"""A checkpoint or pending write that cannot be decoded is a typed error naming the run, the
step and the type, on both backends; it never reads back as None, and nothing in it runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_POS_ARGS

from raw_sql import raw_sql
from stageline.errors import CheckpointCorrupt
from stageline.ledger import Backend

_OPT = ormsgpack.OPT_NON_STR_KEYS
CONF: Any = {"configurable": {"thread_id": "r1", "checkpoint_ns": ""}}


@pytest.fixture
def backend(shared_backend: Backend) -> Backend:
    return shared_backend


def _sql(backend: Backend, sql: str, *params: Any) -> Any:
    """Run one statement on the backend's database, behind the saver's back."""
    return raw_sql(backend.ledger.url, sql, *params)


async def _saved(backend: Backend) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"draft": "a draft"}
    checkpoint["channel_versions"] = {"draft": "1"}
    stored = await backend.saver.aput(CONF, checkpoint, {"step": 3}, {"draft": "1"})  # type: ignore[typeddict-item]
    await backend.saver.aput_writes(stored, [("draft", "a write")], "task1")
    return stored


def _hostile(marker: Path) -> ormsgpack.Ext:
    return ormsgpack.Ext(
        EXT_CONSTRUCTOR_POS_ARGS, ormsgpack.packb(("os", "system", [f"touch {marker}"]))
    )


async def test_a_type_off_the_allowlist_names_run_step_and_type(
    backend: Backend, tmp_path: Path
) -> None:
    await _saved(backend)
    marker = tmp_path / "pwned"
    ((blob,),) = _sql(backend, "SELECT checkpoint FROM stageline_checkpoints")
    keep: Any = lambda code, data: ormsgpack.Ext(code, data)  # noqa: E731
    checkpoint = ormsgpack.unpackb(bytes(blob), ext_hook=keep, option=_OPT)
    checkpoint["channel_values"]["draft"] = _hostile(marker)
    _sql(backend, "UPDATE stageline_checkpoints SET checkpoint = ?", ormsgpack.packb(checkpoint))
    for read in (backend.saver.aget_tuple(CONF), anext(backend.saver.alist(CONF))):
        with pytest.raises(CheckpointCorrupt) as got:
            await read
        assert got.value.run_id == "r1"
        assert "step 3" in str(got.value) and "os.system" in str(got.value)
    assert not marker.exists()


async def test_a_truncated_blob_names_run_step_and_type(backend: Backend) -> None:
    await _saved(backend)
    ((blob,),) = _sql(backend, "SELECT checkpoint FROM stageline_checkpoints")
    _sql(backend, "UPDATE stageline_checkpoints SET checkpoint = ?", bytes(blob)[: len(blob) // 2])
    with pytest.raises(CheckpointCorrupt) as got:
        await backend.saver.aget_tuple(CONF)
    assert got.value.run_id == "r1"
    assert "step 3" in str(got.value) and "msgpack" in str(got.value)


async def test_a_hostile_pending_write_is_refused_not_dropped(
    backend: Backend, tmp_path: Path
) -> None:
    await _saved(backend)
    marker = tmp_path / "pwned"
    _sql(
        backend,
        "UPDATE stageline_checkpoint_writes SET value = ?",
        ormsgpack.packb(_hostile(marker)),
    )
    with pytest.raises(CheckpointCorrupt) as got:
        await backend.saver.aget_tuple(CONF)
    assert "'draft'" in str(got.value) and "os.system" in str(got.value)
    assert not marker.exists()


async def test_an_intact_checkpoint_reads_back(backend: Backend) -> None:
    stored = await _saved(backend)
    saved = await backend.saver.aget_tuple(CONF)
    assert saved is not None and saved.config == stored
    assert saved.checkpoint["channel_values"] == {"draft": "a draft"}
    assert saved.pending_writes == [("task1", "draft", "a write")]
    assert saved.metadata["step"] == 3


async def _grown(backend: Backend) -> Any:
    """Three checkpoints of a list that grows: the last two store what they appended."""
    conf, stored, items = CONF, None, []
    for step in range(1, 4):
        items = [*items, f"item {step}"]  # the same items, as a reducer keeps them
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"items": items}
        checkpoint["channel_versions"] = {"items": str(step)}
        metadata: Any = {"step": step}
        stored = await backend.saver.aput(conf, checkpoint, metadata, {"items": str(step)})
        conf = stored
    return stored


async def test_a_delta_whose_base_is_gone_is_corrupt_not_shorter(backend: Backend) -> None:
    stored = await _grown(backend)
    assert _sql(backend, "SELECT base_version FROM stageline_checkpoint_blobs WHERE version = '3'")
    _sql(backend, "DELETE FROM stageline_checkpoint_blobs WHERE version = '2'")
    with pytest.raises(CheckpointCorrupt) as got:
        await backend.saver.aget_tuple(stored)
    assert got.value.run_id == "r1"
    assert "step 3" in str(got.value) and "'items'" in str(got.value)
    assert "not stored" in str(got.value)


async def test_a_truncated_delta_names_run_step_and_type(backend: Backend) -> None:
    stored = await _grown(backend)
    ((blob,),) = _sql(backend, "SELECT blob FROM stageline_checkpoint_blobs WHERE version = '3'")
    _sql(
        backend,
        "UPDATE stageline_checkpoint_blobs SET blob = ? WHERE version = '3'",
        bytes(blob)[: len(blob) // 2],
    )
    with pytest.raises(CheckpointCorrupt) as got:
        await backend.saver.aget_tuple(stored)
    assert got.value.run_id == "r1"
    assert "step 3" in str(got.value) and "stageline-delta" in str(got.value)


@pytest.mark.parametrize("version", ["1", "3"], ids=["whole", "delta"])
async def test_a_hostile_value_row_is_refused(
    backend: Backend, tmp_path: Path, version: str
) -> None:
    stored = await _grown(backend)
    marker = tmp_path / "pwned"
    hostile = ormsgpack.packb([_hostile(marker)])
    if version == "3":  # the appended items of a delta
        hostile = ormsgpack.packb(["msgpack", 2, hostile])
    _sql(
        backend,
        "UPDATE stageline_checkpoint_blobs SET blob = ? WHERE version = ?",
        hostile,
        version,
    )
    with pytest.raises(CheckpointCorrupt) as got:
        await backend.saver.aget_tuple(stored)
    assert got.value.run_id == "r1"
    assert "step 3" in str(got.value) and "os.system" in str(got.value)
    assert not marker.exists()
