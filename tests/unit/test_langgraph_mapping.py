"""How stageline's runs look to LangGraph clients: statuses, metadata filters, resume values."""

from __future__ import annotations

import pytest
from fastapi import HTTPException

from stageline.ledger import ApiRunStatus, Run, RunStatus, ThreadMeta, Wait, WaitKind
from stageline.server.langgraph._execute import _chosen, _gate_decision
from stageline.server.langgraph._mapping import (
    api_status_of,
    assistant_of,
    matches,
    runs_of_thread_status,
    thread_json,
    thread_status,
)
from stageline.server.langgraph._stream import thread_event_id


def _run(status: RunStatus, template: str = "blog_post") -> Run:
    return Run(run_id="r1", template=template, template_version="1", status=status)


@pytest.mark.parametrize(
    ("status", "thread", "api"),
    [
        (RunStatus.QUEUED, "busy", ApiRunStatus.PENDING),
        (RunStatus.RUNNING, "busy", ApiRunStatus.RUNNING),
        (RunStatus.WAITING, "interrupted", ApiRunStatus.SUCCESS),
        (RunStatus.SUCCEEDED, "idle", ApiRunStatus.SUCCESS),
        (RunStatus.FAILED, "error", ApiRunStatus.ERROR),
        (RunStatus.CANCELLED, "idle", ApiRunStatus.INTERRUPTED),
        (RunStatus.REJECTED, "idle", ApiRunStatus.SUCCESS),
        (RunStatus.TAKEN_OVER, "idle", ApiRunStatus.SUCCESS),
        (RunStatus.PARKED, "interrupted", ApiRunStatus.SUCCESS),
        (RunStatus.STOPPED, "idle", ApiRunStatus.INTERRUPTED),
    ],
)
def test_run_statuses_map_to_thread_and_run_statuses(
    status: RunStatus, thread: str, api: ApiRunStatus
) -> None:
    assert thread_status(_run(status)) == thread
    assert api_status_of(_run(status)) is api
    assert status in runs_of_thread_status(thread)


def test_every_run_status_has_a_thread_and_a_run_status() -> None:
    for status in RunStatus:
        assert thread_status(_run(status)) in ("idle", "busy", "interrupted", "error")
        assert api_status_of(_run(status)) in ApiRunStatus


def test_a_thread_with_no_run_is_idle_and_one_being_advanced_busy() -> None:
    assert thread_status(None) == "idle"
    assert thread_status(_run(RunStatus.WAITING), busy=True) == "busy"
    assert runs_of_thread_status("busy") == [RunStatus.QUEUED, RunStatus.RUNNING]


def test_metadata_matches_by_containment() -> None:
    found = {"team": "a", "tags": {"x": 1, "y": 2}, "n": 3}
    assert matches(found, {}) and matches(found, {"team": "a", "tags": {"x": 1}})
    assert not matches(found, {"team": "b"}) and not matches(found, {"missing": None})
    assert not matches(found, {"tags": {"x": 2}}) and not matches({"n": 3}, {"n": "3"})


def test_a_thread_shows_its_metadata_with_the_assistant_it_runs() -> None:
    meta = ThreadMeta(run_id="r1", metadata={"team": "a"}, created_at=1.0, updated_at=2.0)
    shown = thread_json("r1", _run(RunStatus.WAITING), meta, None)
    assert shown["metadata"] == {"team": "a", "graph_id": "blog_post", "assistant_id": "blog_post"}
    assert shown["status"] == "interrupted" and shown["created_at"].startswith("1970-01-01")
    assert thread_json("r2", None, None, None)["metadata"] == {}
    assert assistant_of(_run(RunStatus.QUEUED, "/srv/project/templates/mine.py")) == "mine"


def test_a_thread_with_no_run_has_no_values_error_or_interrupts_yet() -> None:
    """As LangGraph's: ``values`` null, and no ``error`` or ``interrupts`` key."""
    meta = ThreadMeta(run_id="r1", metadata={}, created_at=1.0, updated_at=2.0)
    empty = thread_json("r1", None, meta, None)
    assert empty["values"] is None and "error" not in empty and "interrupts" not in empty
    started = thread_json("r1", _run(RunStatus.FAILED), meta, None)
    assert (started["values"], started["interrupts"]) == ({}, {}) and "error" in started


@pytest.mark.parametrize(
    ("given", "found"),
    [(None, None), ("", None), ("a-b:0", ("a-b", 0)), ("run:x:12", ("run:x", 12))],
)
def test_a_thread_streams_last_event_id_names_a_run_and_an_event(
    given: str | None, found: tuple[str, int] | None
) -> None:
    assert thread_event_id(given) == found


@pytest.mark.parametrize("given", ["12", ":3", "run:", "run:-1", "run:1e3", "run:" + "9" * 19])
def test_a_thread_streams_last_event_id_of_another_form_is_refused(given: str) -> None:
    with pytest.raises(ValueError, match="API_RUN_ID:NUMBER"):
        thread_event_id(given)


@pytest.mark.parametrize(
    ("value", "decision", "note"),
    [
        ("approve", "approve", None),
        ("reject", "reject", None),
        ({"decision": "reject", "note": "off topic"}, "reject", "off topic"),
        ({"decision": "changes", "note": "shorter"}, "changes", "shorter"),
    ],
)
def test_gate_resume_values(value: object, decision: str, note: str | None) -> None:
    assert _gate_decision(value) == (decision, note)


@pytest.mark.parametrize(
    "value",
    [
        "maybe",
        True,
        None,
        ["approve"],
        {"decision": "changes"},
        {"decision": "changes", "note": "  "},
        {"decision": "approve", "note": 5},
        {"answer": "approve"},
    ],
)
def test_bad_gate_resume_values_are_422(value: object) -> None:
    with pytest.raises(HTTPException) as refused:
        _gate_decision(value)
    assert refused.value.status_code == 422


def _wait(interrupt_id: str, kind: WaitKind = WaitKind.GATE) -> Wait:
    return Wait(
        run_id="r1",
        wait_id=f"w-{interrupt_id}",
        round=1,
        kind=kind,
        name="g",
        node="g",
        attempt=1,
        interrupt_id=interrupt_id,
        payload={},
    )


def test_a_resume_is_for_the_interrupt_it_names_or_the_only_one() -> None:
    one, two = _wait("i1"), _wait("i2")
    assert _chosen([one], "approve") == (one, "approve")
    assert _chosen([one], {"scope": "x"}) == (one, {"scope": "x"})
    assert _chosen([one, two], {"i2": "reject"}) == (two, "reject")
    for ambiguous in ("approve", {"i1": "approve", "i2": "reject"}):
        with pytest.raises(HTTPException) as refused:
            _chosen([one, two], ambiguous)
        assert refused.value.status_code == 422
