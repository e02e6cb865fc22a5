"""Plain LangGraph graphs (``tests/fixtures/langgraph_project``, no stageline imports) run
through the Python API on SQLite and Postgres, each node recorded from LangGraph's tasks stream.
"""

from __future__ import annotations

import operator
import shutil
import threading
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph
from langgraph.types import RetryPolicy, Send, interrupt

from stageline.config import Settings, load_settings
from stageline.errors import AlreadyDecided, InputError
from stageline.ledger import NodeRecord
from stageline.runner import Runner, RunSummary, outcome_stats
from stageline.templates import Template, list_templates

CORPUS = Path(__file__).parents[1] / "fixtures" / "langgraph_project"
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(params=["sqlite", "postgres"])
def project(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """A copy of the corpus project, its ledger on SQLite or Postgres."""
    root = tmp_path / "project"
    shutil.copytree(CORPUS, root)
    url = (
        request.getfixturevalue("postgres_url")
        if request.param == "postgres"
        else f"sqlite:///{tmp_path / 'stageline.db'}"
    )
    env = {"STAGELINE_HOME": str(tmp_path / "home"), "STAGELINE_DATABASE_URL": url}
    return load_settings(cwd=root, env=env)


@pytest.fixture
async def runner(project: Settings) -> AsyncIterator[Runner]:
    async with Runner.open(project) as opened:
        yield opened


def nodes(summary: RunSummary) -> list[tuple[str, str]]:
    return [(r.node, str(r.status)) for r in summary.records]


def only(summary: RunSummary, node: str) -> list[NodeRecord]:
    return [r for r in summary.records if r.node == node]


def test_the_graphs_of_langgraph_json_are_templates(project: Settings) -> None:
    listed = {i.name: i for i in list_templates(project.template_dirs)}
    for name in ("agent", "map_reduce", "ask_name", "command_retry", "inbox", "factory"):
        assert listed[name].origin == "langgraph.json"
    assert listed["greeter"].source == "./graphs/greeter.py:graph"
    assert listed["blog_post"].origin == "builtin"


async def test_a_tool_calling_agent_records_tokens_and_tool_calls(runner: Runner) -> None:
    done = await runner.start("agent", {"messages": WEATHER})
    assert str(done.run.status) == "succeeded"
    assert nodes(done) == [
        ("agent", "succeeded"),
        ("tools", "succeeded"),
        ("agent", "succeeded"),
    ]
    model_calls = only(done, "agent")
    assert [(r.metrics["input_tokens"], r.metrics["output_tokens"]) for r in model_calls] == [
        (12, 5),
        (20, 7),
    ]
    assert "input_tokens" not in only(done, "tools")[0].metrics
    assert done.state["messages"][-1].content == "It is sunny in Paris."
    calls = [e for e in await runner.ledger.events(done.run.run_id) if e.kind == "node.tool_call"]
    assert [(e.node, e.data["tool"], e.data["id"]) for e in calls] == [
        ("agent", "get_weather", "call_1")
    ]
    assert all("Paris" not in str(e.data) for e in calls)  # the arguments stay out


async def test_send_tasks_are_told_apart(runner: Runner) -> None:
    done = await runner.start("map_reduce", {"topic": "pets"})
    assert str(done.run.status) == "succeeded"
    jokes = only(done, "generate_joke")
    assert len(jokes) == 3 and len({r.task_id for r in jokes}) == 3
    assert {str(r.status) for r in jokes} == {"succeeded"}
    assert [r.node for r in done.records if r.node != "generate_joke"] == [
        "generate_topics",
        "best_joke",
    ]
    assert done.state["best_selected_joke"] == "a joke about pets: cats"


async def test_command_routing_and_a_retry_policy(runner: Runner) -> None:
    done = await runner.start("command_retry", {"value": 1})
    assert str(done.run.status) == "succeeded"
    # The RetryPolicy's tries, each its own record of the one task, as a stage's would be.
    assert nodes(done) == [("decide", "succeeded"), ("flaky", "failed"), ("flaky", "succeeded")]
    failed, passed = only(done, "flaky")
    assert (failed.task_id, failed.try_no, passed.try_no) == (passed.task_id, 1, 2)
    assert failed.error == "ConnectionError: the service dropped the connection"
    assert failed.failure_phase == "node" and passed.error is None
    assert failed.finished_at is not None and failed.finished_at <= passed.started_at
    assert done.run.failed_node is None and done.run.error is None
    assert done.state["path"] == ["decide", "flaky"] and done.state["value"] == 2
    events = await runner.ledger.events(done.run.run_id)
    assert [(e.kind, e.data["try"]) for e in events if e.node == "flaky"] == [
        ("node.started", 1),
        ("node.failed", 1),
        ("node.started", 2),
        ("node.succeeded", 2),
    ]
    outcomes = await runner.ledger.outcomes(template="command_retry")
    assert [(o.try_no, o.status) for o in outcomes if o.node == "flaky"] == [
        (1, "failed"),
        (2, "succeeded"),
    ]
    skipped = await runner.start("command_retry", {"value": -1})
    assert nodes(skipped) == [("decide", "succeeded"), ("skip", "succeeded")]


class Count(TypedDict, total=False):
    n: int


def _booming(tries: Counter[str], inner_retries: bool) -> StateGraph[Any, Any, Any, Any]:
    """A graph whose subgraph ``work`` has a node ``boom`` that always fails; retried three
    times, by its own RetryPolicy or by the subgraph node's."""
    policy = RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=False)

    def boom(state: Count) -> dict[str, Any]:
        tries["boom"] += 1
        raise ConnectionError(f"try {tries['boom']} broke")

    inner = StateGraph(Count)
    inner.add_node("boom", boom, retry_policy=policy if inner_retries else None)
    inner.add_edge(START, "boom")
    outer = StateGraph(Count)
    outer.add_node("work", inner.compile(), retry_policy=None if inner_retries else policy)
    outer.add_edge(START, "work")
    return outer


async def test_every_try_of_a_node_that_runs_out_of_tries_in_a_subgraph(runner: Runner) -> None:
    tries: Counter[str] = Counter()
    failed = await runner.start(graph=_booming(tries, True).compile(name="runs_out"), inputs={})
    assert str(failed.run.status) == "failed" and tries["boom"] == 3
    booms = only(failed, "work/boom")
    assert [(r.try_no, str(r.status), r.error) for r in booms] == [
        (1, "failed", "ConnectionError: try 1 broke"),
        (2, "failed", "ConnectionError: try 2 broke"),
        (3, "failed", "ConnectionError: try 3 broke"),
    ]
    assert len({r.task_id for r in booms}) == 1
    assert {r.failure_phase for r in booms} == {"node"}
    assert [r.try_no for r in only(failed, "work")] == [1]  # the subgraph's task ran once
    # The subgraph retried as a whole: its task's tries, and the inner node's three runs named
    # as the first one is (LangGraph numbers the later runs' namespaces: ``work:<id>|1``).
    tries.clear()
    again = await runner.start(graph=_booming(tries, False).compile(name="reruns"), inputs={})
    assert str(again.run.status) == "failed" and tries["boom"] == 3
    assert [(r.try_no, str(r.status)) for r in only(again, "work")] == [
        (1, "failed"),
        (2, "failed"),
        (3, "failed"),
    ]
    assert [r.error for r in only(again, "work/boom")] == [
        "ConnectionError: try 1 broke",
        "ConnectionError: try 2 broke",
        "ConnectionError: try 3 broke",
    ]
    assert {r.node for r in again.records} == {"work", "work/boom"}


async def test_a_factory_and_a_context_schema(runner: Runner) -> None:
    counted = await runner.start("factory", {"text": "three small words"})
    assert counted.state["words"] == 3 and nodes(counted) == [("count", "succeeded")]
    greeted = await runner.start("greeter", {}, services={"greeting": "Hi"})
    assert greeted.state == {"message": "Hi, world!", "audience": "world"}  # env from the json
    assert nodes(greeted) == [("greet", "succeeded"), ("audience", "succeeded")]


async def test_a_runs_own_context_is_kept_for_every_advance(runner: Runner) -> None:
    given = {"greeting": "Hey", "audience": "team"}
    started = await runner.start("greeter", {}, context=given, services={"greeting": "Hi"})
    assert started.state == {"message": "Hey, team!", "audience": "team"}  # over the services
    queued = await runner.create("greeter", {"name": "Ada"}, context={"greeting": "Howdy"})
    assert queued.inputs["stageline_context"] == {"greeting": "Howdy"}
    resumed = await runner.resume(queued.run_id)  # as a worker or the server advances it
    assert resumed.state == {"name": "Ada", "message": "Howdy, Ada!", "audience": "world"}
    for template, context, says in [
        ("greeter", {"greting": "Hi"}, "unknown context key 'greting' for graph 'greeter'"),
        ("factory", {"greeting": "Hi"}, "graph 'factory' takes no context"),
        ("blog_post", {"greeting": "Hi"}, "template 'blog_post' takes no context"),
    ]:
        with pytest.raises(InputError, match=says):
            await runner.create(
                template, {"topic": "owls"} if template == "blog_post" else {}, context=context
            )
    with pytest.raises(InputError, match="'stageline_context'"):
        await runner.create("greeter", {"stageline_context": {}})


async def test_a_prebuilt_react_agent(runner: Runner) -> None:
    done = await runner.start("react", {"messages": WEATHER})
    assert str(done.run.status) == "succeeded"
    assert [n for n, _ in nodes(done)] == ["agent", "tools", "agent"]
    assert sum(r.metrics.get("output_tokens", 0) for r in done.records) == 12
    stats = await runner.ledger.outcomes(template="react")
    assert Counter(o.node for o in stats) == {"agent": 2, "tools": 1}
    assert sum(o.input_tokens for o in stats) == 32


async def test_interrupting_graphs_wait_then_are_answered(runner: Runner) -> None:
    asked = await runner.start("ask_name", {})
    assert str(asked.run.status) == "waiting"
    assert nodes(asked) == [
        ("prepare", "succeeded"),
        ("asker", "waiting"),
        ("asker/ask", "waiting"),
    ]
    inbox = await runner.start("inbox", {"email": "hello"})
    assert str(inbox.run.status) == "waiting"
    assert nodes(inbox) == [("draft", "succeeded"), ("review", "waiting")]

    [wait] = await runner.pending(asked.run.run_id)
    named = await runner.respond(asked.run.run_id, "Ann", actor="ann", wait_id=wait.wait_id)
    assert str(named.run.status) == "succeeded"  # resumed inside the subgraph that asked
    assert named.state == {"name": "Ann", "greeting": "Hello, Ann"}
    assert nodes(named) == [
        ("prepare", "succeeded"),
        ("asker", "succeeded"),
        ("asker/ask", "succeeded"),
        ("greet", "succeeded"),
    ]
    with pytest.raises(AlreadyDecided, match="already answered by ann"):
        await runner.respond(asked.run.run_id, "Bo", actor="bo", wait_id=wait.wait_id)
    [answered] = (await runner.status(asked.run.run_id)).waits  # every round, answered too
    assert (answered.wait_id, answered.actor, str(answered.status)) == (
        wait.wait_id,
        "ann",
        "applied",
    )
    assert answered.response is not None and answered.response["value"] == "Ann"

    edit = [{"type": "edit", "args": {"action": "send_email", "args": {"reply": "Edited"}}}]
    sent = await runner.respond(inbox.run.run_id, edit, actor="bo")
    assert str(sent.run.status) == "succeeded" and sent.state["reply"] == "Edited"
    assert nodes(sent) == [("draft", "succeeded"), ("review", "succeeded")]
    [reviewed] = (await runner.status(inbox.run.run_id)).waits
    assert (reviewed.actor, reviewed.response and reviewed.response["value"]) == ("bo", edit)


class Tally(TypedDict, total=False):
    items: list[str]
    done: Annotated[list[str], operator.add]


def _counting_graph(calls: Counter[str], fail: list[bool]) -> StateGraph[Any, Any, Any, Any]:
    def first(state: Tally) -> dict[str, Any]:
        calls["first"] += 1
        return {"done": ["first"]}

    def second(state: Tally) -> dict[str, Any]:
        calls["second"] += 1
        if fail[0]:
            raise RuntimeError("not yet")
        return {"done": ["second"]}

    graph = StateGraph(Tally)
    graph.add_node("first", first)
    graph.add_node("second", second)
    graph.add_edge(START, "first")
    graph.add_edge("first", "second")
    return graph


async def test_a_graph_object_fails_then_retries_from_its_checkpoint(runner: Runner) -> None:
    calls: Counter[str] = Counter()
    fail = [True]
    graph = _counting_graph(calls, fail).compile(name="counting")
    failed = await runner.start(graph=graph, inputs={})
    assert str(failed.run.status) == "failed" and failed.run.template == "counting"
    assert failed.run.failed_node == "second"
    record = only(failed, "second")[0]
    assert record.failure_phase == "node" and record.error == "RuntimeError: not yet"
    fail[0] = False
    retried = await runner.retry(failed.run.run_id)
    assert str(retried.run.status) == "succeeded"
    assert calls == {"first": 1, "second": 2}
    assert retried.state["done"] == ["first", "second"]


def _asks_beside_a_sibling(fail: list[bool]) -> StateGraph[Any, Any, Any, Any]:
    """``plan``, then in one step: an ``ask`` per item (``Send``), ``note``, and ``flaky``
    (fails while ``fail[0]``, once ``note`` has ended: a task still running when a sibling
    fails is cancelled, and which comes first would otherwise be up to the machine's load)."""
    noted = threading.Event()

    def ask(state: Tally) -> dict[str, Any]:
        item = state["items"][0]
        return {"done": [f"{item}={interrupt(item)}"]}

    def note(state: Tally) -> dict[str, Any]:
        noted.set()
        return {"done": ["noted"]}

    def flaky(state: Tally) -> dict[str, Any]:
        if fail[0]:
            noted.wait(timeout=120)  # a hang guard; nothing is timed
            raise RuntimeError("not yet")
        return {"done": ["flaky"]}

    def fan_out(state: Tally) -> list[Send]:
        return [Send("ask", {"items": [item]}) for item in state["items"]]

    graph = StateGraph(Tally)
    graph.add_node("plan", lambda state: {})
    graph.add_node("ask", ask)
    graph.add_node("note", note)
    graph.add_node("flaky", flaky)
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", fan_out, ["ask"])
    graph.add_edge("plan", "note")
    graph.add_edge("plan", "flaky")
    return graph


async def test_a_task_whose_writes_are_replayed_leaves_no_second_record(runner: Runner) -> None:
    """When the step runs again (a sibling waited, or failed), LangGraph replays the saved
    writes of the tasks that succeeded: announced, never run, they leave no new record."""
    fail = [True]
    graph = _asks_beside_a_sibling(fail).compile(name="asks_beside")
    failed = await runner.start(graph=graph, inputs={"items": ["a", "b"]})
    assert str(failed.run.status) == "failed"
    fail[0] = False
    run_id = failed.run.run_id
    waits = {w.payload["value"]: w.wait_id for w in (await runner.retry(run_id)).waiting}
    await runner.respond(run_id, "yes", wait_id=waits["a"])
    done = await runner.respond(run_id, "no", wait_id=waits["b"])
    assert str(done.run.status) == "succeeded"
    assert sorted(done.state["done"]) == ["a=yes", "b=no", "flaky", "noted"]
    records = (await runner.status(run_id)).records
    assert sorted((r.node, r.attempt, str(r.status)) for r in records) == [
        ("ask", 1, "waiting"),
        ("ask", 1, "waiting"),
        ("ask", 2, "succeeded"),
        ("ask", 2, "succeeded"),
        ("flaky", 1, "failed"),
        ("flaky", 2, "succeeded"),
        ("note", 1, "succeeded"),
        ("plan", 1, "succeeded"),
    ]


async def test_history_and_fork_of_a_plain_graph(runner: Runner) -> None:
    calls: Counter[str] = Counter()
    graph = _counting_graph(calls, [False])
    done = await runner.start(graph=graph, inputs={"items": ["a"]})
    history = await runner.history(done.run.run_id)
    assert [h.nodes for h in history if h.source == "loop"][1:] == [["first"], ["second"]]
    fork = await runner.fork(done.run.run_id, at_step=history[-1].step)
    assert str(fork.run.status) == "succeeded"
    assert calls == {"first": 1, "second": 2}
    assert [r.node for r in fork.records] == ["second"]


class Jokes(TypedDict, total=False):
    subjects: list[str]
    jokes: Annotated[list[str], operator.add]


class Post(Jokes, total=False):
    title: str


def _jokes() -> StateGraph[Any, Any, Any, Any]:
    def fan_out(state: Jokes) -> list[Send]:
        return [Send("joke", {"subjects": [s]}) for s in state["subjects"]]

    def joke(state: Jokes) -> dict[str, Any]:
        return {"jokes": [f"joke: {state['subjects'][0]}"]}

    graph = StateGraph(Jokes)
    graph.add_node("plan", lambda state: {})
    graph.add_node("joke", joke)
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", fan_out, ["joke"])
    return graph


async def test_a_template_uses_a_graph_as_one_stage(runner: Runner) -> None:
    def title(state: Post, ctx: Any) -> dict[str, Any]:
        return {"title": f"{len(state['jokes'])} jokes"}

    made = Template("jokes_post", state=Post)
    made.add_stage("writers", _jokes().compile())  # as add_graph does
    made.add_stage("title", title)
    made.add_edge("writers", "title")
    done = await runner.start(made, {"subjects": ["cats", "dogs"]})
    assert str(done.run.status) == "succeeded" and done.state["title"] == "2 jokes"
    assert Counter(n for n, _ in nodes(done)) == {
        "writers": 1,
        "writers/plan": 1,
        "writers/joke": 2,
        "title": 1,
    }
    assert len({r.task_id for r in only(done, "writers/joke")}) == 2
    assert "writers" in made.mermaid()
    stats = await outcome_stats(runner.ledger, template="jokes_post")
    assert {n["node"]: n["count"] for n in stats["nodes"]} == {
        "writers": 1,
        "writers/plan": 1,
        "writers/joke": 2,
        "title": 1,
    }


class Named(TypedDict, total=False):
    greeting: str
    name: str


async def test_an_interrupt_in_a_subgraph_a_node_invokes_resumes_inside_it(
    runner: Runner,
) -> None:
    calls: Counter[str] = Counter()

    def before(state: Named) -> dict[str, Any]:
        calls["before"] += 1
        return {"greeting": "Hello"}

    def ask(state: Named) -> dict[str, Any]:
        return {"name": interrupt("What is your name?")}

    inner = StateGraph(Named)
    inner.add_node("before", before)
    inner.add_node("ask", ask)
    inner.add_edge(START, "before")
    inner.add_edge("before", "ask")
    asker = inner.compile()

    async def caller(state: Named) -> dict[str, Any]:  # the subgraph is no node of the graph
        calls["caller"] += 1
        found = await asker.ainvoke({})
        return {"greeting": f"{found['greeting']}, {found['name']}"}

    outer = StateGraph(Named)
    outer.add_node("caller", caller)
    outer.add_edge(START, "caller")
    asked = await runner.start(graph=outer.compile(name="invokes"), inputs={})
    assert str(asked.run.status) == "waiting"
    [wait] = asked.waits
    assert (wait.node, wait.name) == ("caller", "caller/ask")  # the run's node, then where
    caller_task = only(asked, "caller")[0].task_id
    assert wait.payload["namespace"] == f"caller:{caller_task}"
    assert wait.payload["path"] == ["caller", "ask"]
    assert nodes(asked) == [
        ("caller", "waiting"),
        ("caller/before", "succeeded"),
        ("caller/ask", "waiting"),
    ]
    assert [w.wait_id for w in await runner.pending(asked.run.run_id)] == [wait.wait_id]
    done = await runner.respond(asked.run.run_id, "Ada", wait_id=wait.wait_id, actor="me")
    assert str(done.run.status) == "succeeded"
    assert done.state["greeting"] == "Hello, Ada"
    assert calls == {"caller": 2, "before": 1}  # the subgraph went on from its checkpoint
    assert [(n, s) for n, s in nodes(done) if n != "caller/before"] == [
        ("caller", "succeeded"),
        ("caller/ask", "succeeded"),
    ]
