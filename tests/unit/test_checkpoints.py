"""Strict checkpoint deserialization: only allowlisted types are ever revived."""

from __future__ import annotations

import datetime
import enum
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

from stageline.checkpoints import checkpoint_serde, ensure_checkpointable


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
    "value", [Finding(claim="c", score=0.5), Note(text="n"), Colour.RED], ids=repr
)
def test_a_blob_naming_a_type_off_the_allowlist_is_not_revived(value: Any) -> None:
    blob = checkpoint_serde(ALLOWED).dumps_typed(value)
    assert checkpoint_serde(ALLOWED).loads_typed(blob) == value  # allowed: revived
    back = checkpoint_serde().loads_typed(blob)
    assert not isinstance(back, type(value))
    assert back != value


def test_a_crafted_blob_never_calls_what_it_names(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = ormsgpack.packb(("os", "system", f"touch {marker}"))
    blob = ormsgpack.packb(ormsgpack.Ext(EXT_CONSTRUCTOR_SINGLE_ARG, payload))
    back = checkpoint_serde().loads_typed(("msgpack", blob))
    assert back == f"touch {marker}"  # handed back as data
    assert not marker.exists()


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
    got = await strict.aget_tuple(saved)
    assert got is not None
    finding = got.checkpoint["channel_values"]["finding"]
    assert not isinstance(finding, Finding)
    assert finding == {"claim": "c", "score": 1.0}


@pytest.mark.parametrize(
    "value",
    [
        None, 1, 1.5, "text", b"bytes", True, [1, "a"], (1, 2), {"a": {"b": [1, 2.0]}}, {1, 2},
        datetime.datetime(2025, 1, 2, 3, 4, 5), uuid.UUID(int=7),
        {"nested": [(1, {"deep": "ok"})]},
    ],
    ids=repr,
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
