"""Strict checkpoint deserialization: only allowlisted types are ever revived."""

from __future__ import annotations

import datetime
import enum
import pickle
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_SINGLE_ARG
from pydantic import BaseModel

from plain_ids import plain_id
from stageline.checkpoints import checkpoint_serde, ensure_checkpointable
from stageline.errors import CheckpointCorrupt


class Finding(BaseModel):
    claim: str
    score: float


@dataclass
class Note:
    text: str


class Colour(enum.Enum):
    RED = "red"


ALLOWED = [Finding, Note, Colour]


@pytest.mark.parametrize(
    "value", [Finding(claim="c", score=0.5), Note(text="n"), Colour.RED], ids=plain_id
)
def test_a_blob_naming_a_type_off_the_allowlist_is_refused(value: Any) -> None:
    blob = checkpoint_serde(ALLOWED).dumps_typed(value)
    assert checkpoint_serde(ALLOWED).loads_typed(blob) == value  # allowed: revived
    with pytest.raises(CheckpointCorrupt, match=type(value).__name__) as refused:
        checkpoint_serde().loads_typed(blob)
    assert refused.value.exit_code == 6


def test_a_crafted_blob_never_calls_what_it_names(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = ormsgpack.packb(("os", "system", f"touch {marker}"))
    blob = ormsgpack.packb(ormsgpack.Ext(EXT_CONSTRUCTOR_SINGLE_ARG, payload))
    with pytest.raises(CheckpointCorrupt, match=r"names type os\.system, which is not on"):
        checkpoint_serde().loads_typed(("msgpack", blob))
    assert not marker.exists()


class _Boom:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("kind", ["pickle", "json", "whatever"])
def test_a_value_in_a_serialization_stageline_never_writes_is_refused(
    tmp_path: Path, kind: str
) -> None:
    marker = tmp_path / "pwned"
    blob = pickle.dumps(_Boom(marker))
    with pytest.raises(CheckpointCorrupt, match=f"stored as '{kind}'"):
        checkpoint_serde().loads_typed((kind, blob))
    assert not marker.exists()


def test_a_cut_blob_is_refused() -> None:
    kind, blob = checkpoint_serde().dumps_typed({"draft": "x" * 100, "n": [1, 2, 3]})
    with pytest.raises(CheckpointCorrupt, match="does not decode"):
        checkpoint_serde().loads_typed((kind, blob[: len(blob) // 2]))


async def test_a_saver_with_the_strict_serde_refuses_foreign_types_in_checkpoints() -> None:
    saver = InMemorySaver(serde=checkpoint_serde(ALLOWED))
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"finding": Finding(claim="c", score=1.0)}
    checkpoint["channel_versions"] = {"finding": 1}
    saved = await saver.aput(config, checkpoint, {}, {"finding": 1})
    got = await saver.aget_tuple(saved)
    assert got is not None
    assert got.checkpoint["channel_values"]["finding"] == Finding(claim="c", score=1.0)

    strict = InMemorySaver(serde=checkpoint_serde())
    strict.storage, strict.blobs = saver.storage, saver.blobs  # the same stored bytes
    with pytest.raises(CheckpointCorrupt, match="Finding"):
        await strict.aget_tuple(saved)


@pytest.mark.parametrize(
    "value",
    [
        None,
        1,
        1.5,
        "text",
        b"bytes",
        True,
        [1, "a"],
        (1, 2),
        {"a": {"b": [1, 2.0]}},
        {1, 2},
        datetime.datetime(2025, 1, 2, 3, 4, 5),
        uuid.UUID(int=7),
        {"nested": [(1, {"deep": "ok"})]},
    ],
    ids=plain_id,
)
def test_plain_values_are_checkpointable(value: Any) -> None:
    assert ensure_checkpointable(checkpoint_serde(), value) is None


def test_registered_types_are_checkpointable_even_nested() -> None:
    serde = checkpoint_serde(ALLOWED)
    for value in (Finding(claim="c", score=1.0), {"notes": [Note(text="n")]}, [Colour.RED]):
        assert ensure_checkpointable(serde, value) is None


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (threading.Lock(), "lock cannot be serialized"),
        (object(), "object cannot be serialized"),
        (lambda: 1, "function cannot be serialized"),
        (Finding(claim="c", score=1.0), "Finding is not on the checkpoint allowlist"),
        (Colour.RED, "Colour is not on the checkpoint allowlist (read back as str)"),
        (ValueError("x"), "ValueError is not on the checkpoint allowlist"),
        ({"a": {"b": Note(text="n")}}, "Note at ['a']['b'] is not on the checkpoint allowlist"),
        ([1, Finding(claim="c", score=1.0)], "Finding at [1] is not on the checkpoint allowlist"),
        ({"k": [threading.Lock()]}, "dict cannot be serialized"),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, str) else "",
)
def test_values_that_do_not_survive_a_checkpoint_are_named(value: Any, says: str) -> None:
    why = ensure_checkpointable(checkpoint_serde(), value)
    assert why is not None
    assert says in why
