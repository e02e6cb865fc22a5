"""Tampered checkpoints are refused, loudly: rows changed by hand in the real database file.

A run waits at its gate; a row of LangGraph's checkpoint tables is changed the way an attacker
with write access to the database would. ``approve`` exits 6 naming the run, records nothing
and moves nothing; ``show`` still shows the ledger and says the checkpoint cannot be read; what
a hostile payload would run never runs.
"""

from __future__ import annotations

import json
import pickle
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from _procs import cli, cli_env
from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_POS_ARGS

TEMPLATE = """
from typing import Any, TypedDict

from stageline.templates import Template


class State(TypedDict, total=False):
    draft: str
    feedback: str


async def write(state: State, ctx: Any) -> dict[str, Any]:
    return {"draft": "the real draft"}


template = Template("tamper_gate", state=State)
template.add_stage("write", write).add_gate("approval", changes_to="write")
template.add_edge("write", "approval")
"""

_OPT = ormsgpack.OPT_NON_STR_KEYS


class _Ext:
    """An extension value as stored (not a dataclass: msgpack would write that as a map)."""

    def __init__(self, code: int, data: bytes) -> None:
        self.code, self.data = code, data


def _raw(blob: bytes) -> Any:
    """A msgpack blob decoded with its extension values kept as they are."""
    return ormsgpack.unpackb(blob, ext_hook=_Ext, option=_OPT)


def _pack(value: Any) -> bytes:
    return ormsgpack.packb(value, option=_OPT, default=lambda e: ormsgpack.Ext(e.code, e.data))


def _hostile(marker: Path) -> _Ext:
    """What would run ``touch MARKER`` if a permissive reader revived it."""
    return _Ext(EXT_CONSTRUCTOR_POS_ARGS, ormsgpack.packb(("os", "system", [f"touch {marker}"])))


class _Boom:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def _latest(db: sqlite3.Connection) -> str:
    (cid,) = db.execute(
        "SELECT max(checkpoint_id) FROM stageline_checkpoints WHERE thread_id = 't'"
    ).fetchone()
    return str(cid)


def off_allowlist(db: sqlite3.Connection, marker: Path) -> None:
    cid = _latest(db)
    (blob,) = db.execute(
        "SELECT checkpoint FROM stageline_checkpoints WHERE checkpoint_id = ?", (cid,)
    ).fetchone()
    checkpoint = _raw(blob)
    checkpoint["channel_values"]["draft"] = _hostile(marker)
    db.execute(
        "UPDATE stageline_checkpoints SET checkpoint = ? WHERE checkpoint_id = ?",
        (_pack(checkpoint), cid),
    )


def pickled(db: sqlite3.Connection, marker: Path) -> None:
    db.execute(
        "UPDATE stageline_checkpoints SET type = 'pickle', checkpoint = ? WHERE checkpoint_id = ?",
        (pickle.dumps(_Boom(marker)), _latest(db)),
    )


def truncated(db: sqlite3.Connection, marker: Path) -> None:
    db.execute(
        "UPDATE stageline_checkpoints SET checkpoint = "
        "substr(checkpoint, 1, length(checkpoint) / 2) WHERE checkpoint_id = ?",
        (_latest(db),),
    )


def injected_write(db: sqlite3.Connection, marker: Path) -> None:
    (task,) = db.execute(
        "SELECT task_id FROM stageline_checkpoint_writes "
        "WHERE channel = '__interrupt__' AND checkpoint_id = ?",
        (_latest(db),),
    ).fetchone()
    db.execute(
        "INSERT INTO stageline_checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id,"
        " task_id, task_path, idx, channel, type, value)"
        " VALUES ('t', '', ?, ?, '', 7, 'draft', 'msgpack', ?)",
        (_latest(db), task, ormsgpack.packb("a draft nobody reviewed")),
    )


def tampered_interrupt(db: sqlite3.Connection, marker: Path) -> None:
    cid = _latest(db)
    (task, blob) = db.execute(
        "SELECT task_id, value FROM stageline_checkpoint_writes "
        "WHERE channel = '__interrupt__' AND checkpoint_id = ?",
        (cid,),
    ).fetchone()
    interrupts = _raw(blob)
    module, name, fields = _raw(interrupts[0].data)
    fields["value"]["show"] = {"draft": "a draft nobody wrote"}
    interrupts[0] = _Ext(interrupts[0].code, _pack([module, name, fields]))
    db.execute(
        "UPDATE stageline_checkpoint_writes SET value = ? "
        "WHERE checkpoint_id = ? AND task_id = ? AND channel = '__interrupt__'",
        (_pack(interrupts), cid, task),
    )


TAMPERINGS: dict[str, Callable[[sqlite3.Connection, Path], None]] = {
    f.__name__: f for f in (off_allowlist, pickled, truncated, injected_write, tampered_interrupt)
}


@pytest.fixture(scope="module")
def waiting(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose run ``t`` waits at its gate, made once: each test tampers a copy."""
    made = tmp_path_factory.mktemp("waiting")
    (made / "gate.py").write_text(TEMPLATE)
    assert cli(["run", "gate.py", "--run-id", "t"], made, cli_env(made / "home")).returncode == 3
    return made


@pytest.mark.parametrize("tamper", sorted(TAMPERINGS))
def test_a_tampered_checkpoint_is_refused_and_the_run_stays_put(
    tmp_path: Path, waiting: Path, tamper: str
) -> None:
    shutil.copytree(waiting, tmp_path, dirs_exist_ok=True)
    db_path = tmp_path / "home" / "stageline.db"
    env = cli_env(tmp_path / "home")
    marker = tmp_path / "pwned"
    db = sqlite3.connect(db_path)
    try:
        with db:
            TAMPERINGS[tamper](db, marker)
        before = db.execute(
            "SELECT wait_id, round, status, response FROM stageline_waits"
        ).fetchall()
    finally:
        db.close()

    refused = cli(["approve", "t"], tmp_path, env)
    assert refused.returncode == 6, refused
    line = refused.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line, line
    assert "run t at step 'approval'" in line and "cannot be trusted" in line, line

    shown = cli(["show", "t", "--json"], tmp_path, env)
    assert shown.returncode == 0, shown
    summary = json.loads(shown.stdout)
    assert summary["run"]["status"] == "waiting"  # not advanced
    assert "run t" in summary["checkpoint_error"]
    text = cli(["show", "t"], tmp_path, env)
    assert text.returncode == 0 and "checkpoint: cannot be read" in text.stdout, text
    assert cli(["resume", "t"], tmp_path, env).returncode in (4, 6)  # never past the gate

    db = sqlite3.connect(db_path)
    try:
        after = db.execute(
            "SELECT wait_id, round, status, response FROM stageline_waits"
        ).fetchall()
        decided = db.execute(
            "SELECT COUNT(*) FROM stageline_events WHERE kind = 'gate.decided'"
        ).fetchone()
    finally:
        db.close()
    assert after == before and decided == (0,)  # nothing recorded
    assert not marker.exists()
