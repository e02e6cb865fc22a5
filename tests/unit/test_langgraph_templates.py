"""LangGraph graphs as templates: versions from their structure, factories, langgraph.json
entries and their errors, and the records of tasks (tokens, cost, tool calls)."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.messages import AIMessage
from langgraph.graph import START, StateGraph

from stageline.errors import TemplateError, TemplateNotFound
from stageline.ledger import Event, NodeRecord, NodeStatus, Outcome
from stageline.runner._journal import LedgerJournal
from stageline.runner._tasks import TaskRecords
from stageline.templates import GraphTemplate, graph_template, list_templates, load_template


class State(TypedDict, total=False):
    n: int


def _graph(*names: str) -> StateGraph[Any, Any, Any, Any]:
    graph = StateGraph(State)
    for name in names:
        graph.add_node(name, lambda state: {"n": 1})
    graph.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        graph.add_edge(a, b)
    return graph


def test_the_version_is_a_digest_of_the_structure() -> None:
    one = graph_template(_graph("a", "b"), "g", "here")
    assert one.full_version == graph_template(_graph("a", "b").compile(), "g", "there").full_version
    assert one.full_version != graph_template(_graph("a", "b", "c"), "g", "here").full_version
    assert one.full_version != graph_template(_graph("b", "a"), "g", "here").full_version
    assert one.nodes == ["a", "b"] and one.plain_nodes == {"a", "b"}


def test_factories_with_no_argument_or_a_config() -> None:
    seen: list[Any] = []

    def with_config(config: Any) -> Any:
        seen.append(config)
        return _graph("a").compile()

    assert isinstance(graph_template(lambda: _graph("a"), "z", "f"), GraphTemplate)
    assert graph_template(with_config, "c", "f").nodes == ["a"]
    assert seen == [{"configurable": {}}]
    with pytest.raises(TemplateError, match="not a LangGraph StateGraph"):
        graph_template(lambda: 42, "bad", "f")


def _project(tmp_path: Path, listing: Any, env_file: str | None = None) -> Path:
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "one.py").write_text(
        "import os\nfrom typing import TypedDict\nfrom langgraph.graph import START, StateGraph\n"
        "class S(TypedDict, total=False):\n    n: int\n"
        "builder = StateGraph(S)\nbuilder.add_node('step', lambda s: {'n': 1})\n"
        "builder.add_edge(START, 'step')\ngraph = builder.compile()\nnot_a_graph = 3\n"
        "SEEN = os.environ.get('LG_TEST_SECRET')\n"
    )
    if env_file is not None:
        (tmp_path / ".env").write_text(env_file)
    path = tmp_path / "langgraph.json"
    path.write_text(json.dumps(listing) if not isinstance(listing, str) else listing)
    return path


def test_langgraph_json_entries_load_by_name_with_their_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LG_TEST_SECRET", raising=False)
    monkeypatch.setenv("LG_TEST_KEPT", "mine")
    listing = {"graphs": {"one": "./graphs/one.py:graph"}, "env": ".env"}
    path = _project(tmp_path, listing, "LG_TEST_SECRET=s3cret\nLG_TEST_KEPT=theirs\n")
    infos = {i.name: i for i in list_templates([path])}
    assert infos["one"].origin == "langgraph.json"
    made = load_template("one", [path])
    assert isinstance(made, GraphTemplate) and made.nodes == ["step"]
    assert os.environ["LG_TEST_SECRET"] == "s3cret"
    assert os.environ["LG_TEST_KEPT"] == "mine"  # the process's own environment wins
    monkeypatch.delenv("LG_TEST_SECRET")
    assert load_template("one", [path]) is made  # compiled once per process


@pytest.mark.parametrize(
    ("listing", "message"),
    [
        ({"graphs": {"x": "./graphs/one.py:not_a_graph"}}, "not a LangGraph StateGraph"),
        ({"graphs": {"x": "./graphs/one.py:missing"}}, "has no 'missing'"),
        ({"graphs": {"x": "./graphs/nowhere.py:graph"}}, "no file ./graphs/nowhere.py"),
        ({"graphs": {"x": "graph"}}, "is not 'file.py:attr'"),
        ({"graphs": ["x"]}, '"graphs" must map names'),
        ("{not json", "cannot read it"),
    ],
)
def test_a_bad_entry_is_a_clear_template_error(tmp_path: Path, listing: Any, message: str) -> None:
    path = _project(tmp_path, listing)
    with pytest.raises(TemplateError, match=message):
        load_template("x", [path])


def test_an_unknown_name_lists_the_graphs(tmp_path: Path) -> None:
    path = _project(tmp_path, {"graphs": {"one": "./graphs/one.py:graph"}})
    with pytest.raises(TemplateNotFound) as found:
        load_template("two", [path])
    assert "one" in str(found.value)


class _Ledger:
    """The staging side of a ledger, kept in lists."""

    def __init__(self) -> None:
        self.nodes: list[NodeRecord] = []
        self.events: list[Event] = []
        self.outcomes: list[Outcome] = []

    def stage_node(self, record: NodeRecord) -> None:
        self.nodes.append(record)

    def stage_event(self, event: Event) -> None:
        self.events.append(event)

    def stage_outcome(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)


def test_task_events_become_records_with_tokens_cost_and_tool_calls() -> None:
    ledger = _Ledger()
    journal = LedgerJournal(ledger, "r1", 1)  # type: ignore[arg-type]
    tasks = TaskRecords(journal, "agent", frozenset({"model", "sub"}))
    answer = AIMessage(
        content="",
        tool_calls=[{"name": "lookup", "args": {"token": "sk-secret"}, "id": "c1"}],
        usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
        response_metadata={"cost": 0.25},
    )
    tasks.observe((), {"id": "t1", "name": "model", "input": {}, "triggers": ()})
    tasks.observe(
        (),
        {
            "id": "t1",
            "name": "model",
            "result": {"messages": [answer]},
            "error": None,
            "interrupts": [],
        },
    )
    tasks.observe((), {"id": "t2", "name": "sub", "input": {}, "triggers": ()})
    tasks.observe(("sub:t2",), {"id": "t3", "name": "inner", "input": {}, "triggers": ()})
    tasks.observe(
        ("sub:t2",),
        {"id": "t3", "name": "inner", "result": {}, "error": ValueError("no"), "interrupts": []},
    )
    tasks.observe(
        (),
        {
            "id": "t2",
            "name": "sub",
            "result": {"messages": [answer]},
            "error": None,
            "interrupts": [],
        },
    )
    tasks.observe(
        (), {"id": "t4", "name": "other", "input": {}, "triggers": ()}
    )  # a stageline stage's
    tasks.observe((), {"id": "t5", "name": "model", "input": {}, "triggers": ()})
    tasks.close()
    final = {r.task_id: r for r in ledger.nodes}
    assert final["t1"].metrics == {
        "input_tokens": 3,
        "output_tokens": 4,
        "cost": 0.25,
        "llm_calls": 1,
    }
    assert final["t2"].metrics == {}  # a subgraph's tokens are its nodes'
    assert (
        final["t3"].node,
        str(final["t3"].status),
        final["t3"].error,
        final["t3"].failure_phase,
    ) == (
        "sub/inner",
        "failed",
        "ValueError: no",
        "node",
    )
    assert "t4" not in final
    assert (str(final["t5"].status), final["t5"].failure_phase) == ("failed", "interrupted")
    calls = [e for e in ledger.events if e.kind == "node.tool_call"]
    assert [(e.node, e.data["tool"], e.data["id"]) for e in calls] == [("model", "lookup", "c1")]
    assert "sk-secret" not in repr(ledger.events)
    assert [(o.node, o.cost) for o in ledger.outcomes] == [
        ("model", 0.25),
        ("sub/inner", 0.0),
        ("sub", 0.0),
    ]


def test_a_task_that_succeeded_before_is_replayed_and_leaves_no_record() -> None:
    """A step run again (a sibling waited or failed) replays the saved writes of the tasks that
    succeeded: LangGraph announces them and never reports their end."""
    done = NodeRecord(
        run_id="r1",
        task_id="t1",
        attempt=1,
        try_no=1,
        node="model",
        stage="model",
        status=NodeStatus.SUCCEEDED,
        started_at=1.0,
    )
    ledger = _Ledger()
    journal = LedgerJournal(ledger, "r1", 2, previous=[done])  # type: ignore[arg-type]
    tasks = TaskRecords(journal, "agent", frozenset({"model"}))
    tasks.observe((), {"id": "t1", "name": "model", "input": {}, "triggers": ()})
    tasks.observe((), {"id": "t2", "name": "model", "input": {}, "triggers": ()})
    tasks.close()  # t2 was stopped before it finished
    assert [(r.task_id, str(r.status)) for r in ledger.nodes] == [
        ("t2", "running"),
        ("t2", "failed"),
    ]
