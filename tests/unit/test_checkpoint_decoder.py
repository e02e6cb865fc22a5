"""``show``'s own checkpoint decoder and its record of unwritten state values: what it reads
as LangGraph does, and everything else left to LangGraph (``Unsure``), never revived."""

from __future__ import annotations

import datetime
import json
import uuid
from collections import deque
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Interrupt

from stageline.checkpoints import checkpoint_serde
from stageline.ledger._checkpoint_read import SavedInterrupt, Unsure, decode
from stageline.runner._state_defaults import recall, remember

VALUES: list[Any] = [
    {"a": [1, 2.5, "x", None, True], "b": {"c": b"raw"}},
    {1: "non-text keys"},
    {
        "at": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        "day": datetime.date(2026, 1, 2),
        "span": datetime.timedelta(seconds=90),
    },
    {
        "id": uuid.UUID(int=7),
        "amount": Decimal("1.50"),
        "tags": {"a", "b"},
        "frozen": frozenset({1}),
        "queue": deque([1, 2]),
        "path": Path("/tmp/x"),
    },
]


@pytest.mark.parametrize("value", VALUES)
def test_plain_and_standard_values_read_back_as_langgraph_reads_them(value: Any) -> None:
    serde = checkpoint_serde()
    kind, blob = serde.dumps_typed(value)
    assert decode(kind, blob) == serde.loads_typed((kind, blob))


def test_an_interrupt_reads_back_with_its_id_and_value() -> None:
    kind, blob = checkpoint_serde().dumps_typed([Interrupt(value={"kind": "gate"}, id="i1")])
    assert decode(kind, blob) == [SavedInterrupt({"kind": "gate"}, "i1")]


@dataclass
class Foreign:
    x: int


def _ext(code: int, *parts: Any) -> bytes:
    return ormsgpack.packb(ormsgpack.Ext(code, ormsgpack.packb(list(parts))))


@pytest.mark.parametrize(
    ("kind", "blob"),
    [
        ("pickle", b"\x80\x04K\x01."),  # a foreign serialization type
        ("json", b"{}"),
        ("msgpack", _ext(0, "os", "system", "echo hi")),  # a type off every allowlist
        ("msgpack", _ext(1, "builtins", "eval", ["1+1"])),
        ("msgpack", _ext(3, "datetime", "datetime", "x", "__reduce__")),  # a method off the list
        ("msgpack", _ext(5, "pydantic", "BaseModel", {})),  # pydantic: for LangGraph to judge
        ("msgpack", _ext(2, "langgraph.types", "Interrupt", {"value": 1, "evil": 2, "id": "x"})),
        ("msgpack", b"\xc1"),  # not msgpack at all
        ("msgpack", None),
    ],
)
def test_anything_else_is_left_to_langgraph(kind: str, blob: bytes | None) -> None:
    with pytest.raises(Unsure):
        decode(kind, blob)


def test_a_type_a_template_registers_is_left_to_langgraph() -> None:
    kind, blob = JsonPlusSerializer().dumps_typed(
        {"x": Foreign(1)}
    )  # a template's dataclass, as LangGraph writes it
    with pytest.raises(Unsure):
        decode(kind, blob)


def test_the_record_of_unwritten_values_round_trips_and_distrusts_anything_odd(
    tmp_path: Path,
) -> None:
    remember(tmp_path, "1+abc", {"reviews": [], "scores": {}, "n": 0}, ["n", "reviews", "x"])
    assert recall(tmp_path, "1+abc") == (
        {"reviews": [], "scores": {}, "n": 0},
        ["n", "reviews", "x"],
    )
    assert recall(tmp_path, "2+abc") is None  # another version: nothing recorded
    remember(tmp_path, "odd", {"x": [1]}, ["x"])  # not an empty value: unsure
    assert recall(tmp_path, "odd") is None
    remember(tmp_path, "../../etc", {}, [])  # a version is never a path
    assert not (tmp_path.parent / "etc").exists() and recall(tmp_path, "../../etc") == ({}, [])
    [record] = [
        p
        for p in (tmp_path / "cache" / "state-defaults").iterdir()
        if json.loads(p.read_text())["version"] == "1+abc"
    ]
    record.write_text('["not", "a", "record"]')
    assert recall(tmp_path, "1+abc") is None
