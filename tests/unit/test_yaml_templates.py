"""YAML templates: a valid one loads and runs on LangGraph; every mistake names file and line."""

from __future__ import annotations

import operator
import re
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, get_args, get_type_hints

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from stageline.errors import TemplateError
from stageline.llm import OfflineModel
from stageline.stages import RunContext
from stageline.templates import END, load_template
from stageline.templates._yaml import load_yaml_template

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))  # makes `yaml_stages` importable from the YAML files

import yaml_stages  # noqa: E402  (registers the `yaml_test.*` stages)

PIPELINE = FIXTURES / "yaml" / "review_pipeline.yaml"


class Journal:
    """Records node lifecycle calls the way the runner's journal would receive them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def node_started(self, *, node: str, **_: Any) -> None:
        self.calls.append(("started", node, ""))

    def node_finished(self, *, node: str, status: str, **_: Any) -> None:
        self.calls.append(("finished", node, status))

    def node_event(self, *, node: str, kind: str, message: str, **_: Any) -> None:
        self.calls.append((kind, node, message))


async def run(template: Any, inputs: Mapping[str, Any], tmp_path: Path) -> tuple[dict, Journal]:
    graph = template.build().compile(checkpointer=InMemorySaver())
    journal = Journal()
    ctx = RunContext(
        run_id="r1",
        attempt=1,
        template=template.name,
        services={},
        journal=journal,
        run_dir=tmp_path,
        model=OfflineModel(),
    )
    config = {"configurable": {"thread_id": "t1"}, "recursion_limit": 100}
    async for _ in graph.astream(
        dict(inputs), config, context=ctx, stream_mode="updates", durability="sync"
    ):
        pass
    return dict(graph.get_state(config).values), journal


# -- a valid template ----------------------------------------------------------------------


def test_valid_template_loads_with_nodes_state_options_and_lines() -> None:
    t = load_yaml_template(PIPELINE)
    assert (t.name, t.version, t.source) == ("review_pipeline", "2", str(PIPELINE))
    assert t.description.startswith("Plan, draft")
    assert t.nodes == ["plan", "draft", "critic_a", "critic_b", "aggregate", "review", "parked"]
    assert t.stage_of("plan").fn is yaml_stages.plan
    assert t.stage_of("critic_a").name == "yaml_test.critic_a"
    draft = t.stage_of("draft")
    assert (draft.retry.max_attempts, draft.timeout, draft.writes) == (2, 30.0, ("draft", "log"))
    retry_b = t.stage_of("critic_b").retry
    assert (retry_b.max_attempts, retry_b.jitter, retry_b.retry_on) == (3, False, ValueError)
    [loop] = t.loops
    assert (loop.name, loop.head, loop.max_iterations, loop.on_exhausted) == (
        "plan_review",
        "plan",
        3,
        "parked",
    )
    assert loop.where == (str(PIPELINE), line_of("{name: plan_review"))
    hints = get_type_hints(t.state, include_extras=True)
    assert hints["topic"] is str
    assert hints["reviews"] == Annotated[list, operator.add]
    assert get_args(hints["best"])[1](3, 5) == 5
    assert get_args(hints["scores"])[1]({"a": 1}, {"b": 2}) == {"a": 1, "b": 2}
    assert "0x" not in repr(hints), "reducer reprs must be stable for the template digest"
    assert load_yaml_template(PIPELINE).full_version == t.full_version


def line_of(fragment: str, after: int = 0) -> int:
    """The 1-based line of the fixture pipeline, past line ``after``, that holds ``fragment``."""
    lines = PIPELINE.read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if n > after and fragment in line)


def test_every_builder_call_names_its_yaml_line() -> None:
    t = load_yaml_template(PIPELINE)
    src = str(PIPELINE)
    assert {n: t._nodes[n].where for n in t.nodes} == {
        n: (src, line_of(f"  {n}:", after=line_of("stages:"))) for n in t.nodes
    }
    assert t._start == ("plan", (src, line_of("start: plan")))
    assert t._edges == [
        ("plan", "draft", (src, line_of("[plan, draft]"))),
        ("aggregate", "review", (src, line_of("{from: aggregate"))),
        ("parked", END, (src, line_of("[parked, END]"))),
    ]
    assert [f.where for f in t._fanouts] == [(src, line_of("{from: draft"))]
    assert [r.where for r in t._routes] == [(src, line_of("{from: review"))]


def test_registry_loads_yaml_by_path() -> None:
    assert load_template(str(PIPELINE)).nodes == load_yaml_template(PIPELINE).nodes


async def test_bounded_loop_runs_end_to_end_and_parks(tmp_path: Path) -> None:
    t = load_yaml_template(PIPELINE)
    state, journal = await run(t, {"topic": "durability"}, tmp_path)
    assert state["rounds"] == 3
    assert state["parked"] is True
    assert sorted(state["reviews"]) == ["a", "a", "a", "b", "b", "b"]
    assert state["scores"] == {"a": 1, "b": 2}
    assert state["best"] == 30
    assert state["log"].count("review") == 3
    assert ("finished", "parked", "succeeded") in journal.calls
    assert ("stage.log", "critic_a", "critic a read the draft") in journal.calls
    assert all(
        status in ("", "succeeded") for kind, _, status in journal.calls if kind == "finished"
    )


async def test_route_to_end_finishes_after_one_round(tmp_path: Path) -> None:
    state, journal = await run(load_yaml_template(PIPELINE), {"topic": "quick"}, tmp_path)
    assert state["rounds"] == 1
    assert "parked" not in state
    assert state["log"] == ["plan", "draft", "aggregate 2", "review"]
    assert ("started", "parked", "") not in journal.calls


def write(tmp_path: Path, text: str, name: str = "t.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def test_defaults_and_alternative_spellings(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        name: small
        state:
          n: {type: int}
          seen: {reducer: append}
        stages:
          first: &opts {use: yaml_stages:plan, retry: 2}
          second:
            <<: *opts
            use: yaml_stages:review
        edges:
          - from: first
            to: second
          - {from: second, to: end}
        routes: []
        """,
    )
    t = load_yaml_template(path)
    assert (t.version, t.description, t.nodes, t.loops) == ("1", "", ["first", "second"], [])
    assert t._start == ("first", (str(path), 6))
    assert t._edges == [("first", "second", (str(path), 11)), ("second", END, (str(path), 13))]
    second = t.stage_of("second")
    assert (second.fn, second.retry.max_attempts) == (yaml_stages.review.fn, 2)
    assert list(get_type_hints(t.state, include_extras=True)) == ["n", "seen"]


def test_route_list_and_yes_no_keys(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        name: r
        stages:
          a: yaml_stages:plan
          b: yaml_stages:review
          c: yaml_stages:parked
        routes:
          - {from: a, by: yaml_stages.route_review, to: [b, c]}
          - from: b
            by: yaml_stages:route_review
            to: {yes: c, no: END}
        """,
    )
    t = load_yaml_template(path)
    first, second = t._routes
    assert first.targets == {"b": "b", "c": "c"}
    assert first.where == (str(path), 7)
    assert second.targets == {"True": "c", "yes": "c", "False": END, "no": END}
    assert second.where == (str(path), 8)
    assert "c" in t.build().compile().get_graph().nodes


# -- mistakes ------------------------------------------------------------------------------
# Each case is a whole file; `# <-` marks the line the error must name (two marks: either).

GOOD_HEAD = """
        name: t
        state:
          text: str
        stages:
          a: yaml_stages:plan
"""


def case(body: str, message: str) -> Any:
    return pytest.param(textwrap.dedent(body).lstrip("\n"), message)


ERRORS = {
    "yaml syntax": case(
        """
        name: t
        stages:
          a: yaml_stages:plan
        edges:
          - [a, b]]  # <-
        """,
        "invalid YAML: while parsing a block collection, expected <block end>, "
        "but found ']' (column 11)",
    ),
    "yaml bad indent": case(
        """
        name: t
        stages:
          a: x
         b: y  # <-
        """,
        "invalid YAML",
    ),
    "duplicate stage": case(
        """
        name: t
        stages:
          a: yaml_stages:plan
          a: yaml_stages:review  # <-
        """,
        "duplicate key 'a'",
    ),
    "unhashable key": case(
        """
        name: t
        stages:
          a: yaml_stages:plan
          [b]: yaml_stages:review  # <-
        """,
        "unhashable key",
    ),
    "empty file": case(
        """
        # <-
        """,
        "the file is empty",
    ),
    "not a mapping": case(
        """
        - name: t  # <-
        """,
        "a template must be a mapping",
    ),
    "missing name": case(
        """
        # a comment
        stages:  # <-
          a: yaml_stages:plan
        """,
        "a template needs `name`",
    ),
    "missing stages": case(
        """
        name: t  # <-
        """,
        "a template needs `stages`",
    ),
    "unknown top-level key": case(
        GOOD_HEAD
        + """
        fan_out: []  # <-
        """,
        "unknown key 'fan_out' in a template; allowed keys: name, version, description",
    ),
    "unknown stage": case(
        """
        name: t
        stages:
          a: yaml_stages:plan
          draft: nope  # <-
        """,
        "unknown stage 'nope' for node 'draft': not registered and not an import path",
    ),
    "unknown stage attribute": case(
        """
        name: t
        stages:
          a: yaml_stages:plan
          draft:
            use: yaml_stages:nope  # <-
        """,
        "unknown stage 'yaml_stages:nope' for node 'draft': yaml_stages has no 'nope'",
    ),
    "unknown stage module": case(
        """
        name: t
        stages:
          a: {use: no_such_module.x}  # <-
        """,
        "unknown stage 'no_such_module.x' for node 'a': cannot import 'no_such_module'",
    ),
    "stage key typo": case(
        """
        name: t
        stages:
          a: {use: yaml_stages:plan, retries: 2}  # <-
        """,
        "unknown key 'retries' in stage 'a'; allowed keys: use, retry, timeout, writes",
    ),
    "stage without use": case(
        """
        name: t
        stages:
          a:  # <-
            retry: 2
        """,
        "stage 'a' needs `use`",
    ),
    "bad node name": case(
        """
        name: t
        stages:
          a:b: yaml_stages:plan  # <-
        """,
        "bad node name 'a:b'",
    ),
    "node named end": case(
        """
        name: t
        stages:
          end: yaml_stages:plan  # <-
        """,
        "bad node name 'end'",
    ),
    "name not a string": case(
        """
        name: [t]  # <-
        stages:
          a: yaml_stages:plan
        """,
        "name must be a non-empty string",
    ),
    "version float": case(
        GOOD_HEAD
        + """
        version: 1.10  # <-
        """,
        "version must be a string (quote it), got 1.1",
    ),
    "bad type name": case(
        """
        name: t
        state:
          text: string  # <-
        stages:
          a: yaml_stages:plan
        """,
        "state key 'text' has unknown type 'string'; types: str, int, float, bool",
    ),
    "bad type in a mapping": case(
        """
        name: t
        state:
          text:
            reducer: append
            type: [list]  # <-
        stages:
          a: yaml_stages:plan
        """,
        "state key 'text' has unknown type ['list']",
    ),
    "reserved state key": case(
        """
        name: t
        state:
          stageline_loops: dict  # <-
        stages:
          a: yaml_stages:plan
        """,
        "bad state key 'stageline_loops'",
    ),
    "unknown reducer": case(
        """
        name: t
        state:
          text: {type: list, reducer: concat}  # <-
        stages:
          a: yaml_stages:plan
        """,
        "state key 'text' has unknown reducer 'concat'; use append, merge or an import",
    ),
    "reducer path that does not resolve": case(
        """
        name: t
        state:
          text:
            type: int
            reducer: yaml_stages:gone  # <-
        stages:
          a: yaml_stages:plan
        """,
        "cannot resolve reducer of state key 'text' 'yaml_stages:gone': AttributeError",
    ),
    "reducer that is not callable": case(
        """
        name: t
        state:
          text: {reducer: yaml_stages.NOT_CALLABLE}  # <-
        stages:
          a: yaml_stages:plan
        """,
        "int object is not callable",
    ),
    "reducer with one argument": case(
        """
        name: t
        state:
          text: {reducer: yaml_stages:not_a_reducer}  # <-
        stages:
          a: yaml_stages:plan
        """,
        "takes 1 positional arguments, not 2",
    ),
    "writes an undeclared key": case(
        GOOD_HEAD
        + """
          b: {use: yaml_stages:review, writes: [text, out]}  # <-
        """,
        "node 'b' writes 'out', not declared under state: (text)",
    ),
    "retry zero": case(
        GOOD_HEAD
        + """
          b: {use: yaml_stages:review, retry: 0}  # <-
        """,
        "node 'b': bad retry: retry must allow at least 1 attempt, got 0",
    ),
    "retry text": case(
        GOOD_HEAD
        + """
          b:
            use: yaml_stages:review
            retry: often  # <-
        """,
        "node 'b': retry (a number of attempts or a mapping) must be a mapping",
    ),
    "retry unknown field": case(
        GOOD_HEAD
        + """
          b: {use: yaml_stages:review, retry: {attempts: 2}}  # <-
        """,
        "unknown key 'attempts' in node 'b': retry",
    ),
    "retry bad max_attempts": case(
        GOOD_HEAD
        + """
          b:
            use: yaml_stages:review
            retry:
              max_attempts: -1  # <-
        """,
        "node 'b': retry max_attempts must be a positive integer, got -1",
    ),
    "retry bad jitter": case(
        GOOD_HEAD
        + """
          b:
            use: yaml_stages:review
            retry: {jitter: maybe}  # <-
        """,
        "node 'b': retry jitter must be true or false, got 'maybe'",
    ),
    "retry_on that does not resolve": case(
        GOOD_HEAD
        + """
          b: {use: yaml_stages:review, retry: {retry_on: [NoSuchError]}}  # <-
        """,
        "cannot resolve node 'b': retry retry_on 'NoSuchError': ValueError: not an import",
    ),
    "timeout negative": case(
        GOOD_HEAD
        + """
          b:
            use: yaml_stages:review
            timeout: -5  # <-
        """,
        "node 'b': bad timeout: timeout must be positive, got -5.0",
    ),
    "timeout text": case(
        GOOD_HEAD
        + """
          b: {use: yaml_stages:review, timeout: soon}  # <-
        """,
        "node 'b': timeout must be a number of seconds, got 'soon'",
    ),
    "start is not a node": case(
        GOOD_HEAD
        + """
        start: z  # <-
        """,
        "start node 'z' is not a stage of this template",
    ),
    "edges not a list": case(
        GOOD_HEAD
        + """
        edges:  # <-
          a: b
        """,
        "`edges` must be a list",
    ),
    "edge of three": case(
        GOOD_HEAD
        + """
          b: yaml_stages:review
        edges:
          - [a, b, c]  # <-
        """,
        "an edge is [from, to] or {from: a, to: b}",
    ),
    "edge to a missing node": case(
        GOOD_HEAD
        + """
          b: yaml_stages:review
        edges:
          - [a, b]
          - from: b  # <-
            to: c
        """,
        "edge to 'c' is not a node of this template (nodes: a, b)",
    ),
    "unreachable node": case(
        GOOD_HEAD
        + """
          b: yaml_stages:review  # <-
        edges:
          - [a, END]
        """,
        "node 'b' is unreachable from the start node 'a'",
    ),
    "route to a missing node": case(
        GOOD_HEAD
        + """
          b: yaml_stages:review
        edges:
          - [a, b]
        routes:
          - {from: b, by: yaml_stages:route_review, to: {again: a, done: c}}  # <-
        """,
        "route to 'c' is not a node of this template",
    ),
    "router that does not resolve": case(
        GOOD_HEAD
        + """
        routes:
          - {from: a, by: yaml_stages:nothing, to: [a]}  # <-
        """,
        "cannot resolve router of the route from 'a' 'yaml_stages:nothing'",
    ),
    "route without by": case(
        GOOD_HEAD
        + """
        routes:
          - from: a  # <-
            to: [END]
        """,
        "a route needs `by`",
    ),
    "cycle of edges without a loop": case(
        GOOD_HEAD
        + """
          b: yaml_stages:review
        edges:
          - [a, b]  # <-
          - [b, a]  # <-
        """,
        "loop through a -> b has no declared bound",
    ),
    "cycle through a route without a loop": case(
        GOOD_HEAD
        + """
          b: yaml_stages:review
        edges:
          - [a, b]  # <-
        routes:
          - {from: b, by: yaml_stages:route_review, to: {again: a, done: END}}  # <-
        """,
        "loop through a -> b has no declared bound",
    ),
    "loop max zero": case(
        GOOD_HEAD
        + """
          b: yaml_stages:review
        edges: [[a, b], [b, a]]
        loops:
          - name: l
            head: a
            max: 0  # <-
        """,
        "loop 'l': `max` must be a positive integer, got 0",
    ),
    "loop max text": case(
        GOOD_HEAD
        + """
        edges: [[a, a]]
        loops:
          - {head: a, max: three}  # <-
        """,
        "loop 'a': `max` must be a positive integer, got 'three'",
    ),
    "loop without max": case(
        GOOD_HEAD
        + """
        edges: [[a, a]]
        loops:
          - {head: a}  # <-
        """,
        "a loop needs `max`",
    ),
    "loop head is not a node": case(
        GOOD_HEAD
        + """
        edges: [[a, a]]
        loops:
          - {head: a, max: 2}
          - {name: other, head: z, max: 2}  # <-
        """,
        "loop 'other' head 'z' is not a node",
    ),
    "loop declared twice": case(
        GOOD_HEAD
        + """
        edges: [[a, a]]
        loops:
          - {head: a, max: 2}
          - {head: a, max: 3}  # <-
        """,
        "loop 'a' is declared twice",
    ),
    "fan-in without a reducer": case(
        """
        name: t
        state:
          reviews: list
          scores: {type: dict, reducer: merge}
          best: {type: int, reducer: yaml_stages.keep_max}
        stages:
          a: yaml_stages:plan
          c: yaml_test.critic_a
          d: yaml_test.critic_b
        fanout:
          - {from: a, to: [c, d]}  # <-
        """,
        "parallel stages c, d all write 'reviews', which has no reducer",
    ),
}


@pytest.mark.parametrize(("text", "message"), list(ERRORS.values()), ids=list(ERRORS))
def test_mistakes_are_template_errors_naming_file_and_line(
    tmp_path: Path, text: str, message: str
) -> None:
    marked = [n for n, line in enumerate(text.splitlines(), 1) if line.rstrip().endswith("# <-")]
    assert marked, "a case marks the line its error names"
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(TemplateError) as caught:
        load_yaml_template(path)
    error = caught.value
    assert (error.source, error.line in marked) == (str(path), True), str(error)
    assert str(error).startswith(f"{path}:{error.line}: ")
    assert message in str(error)


def test_missing_file_is_a_template_error(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="cannot read"):
        load_yaml_template(tmp_path / "absent.yaml")


def test_stage_module_that_fails_on_import_is_a_template_error(tmp_path: Path) -> None:
    (tmp_path / "broken_yaml_stages.py").write_text("x = 1 / 0\n")
    sys.path.insert(0, str(tmp_path))
    try:
        path = write(tmp_path, GOOD_HEAD + "          b: broken_yaml_stages:x\n")
        pattern = rf"^{re.escape(str(path))}:6: unknown stage .* cannot import it: ZeroDivision"
        with pytest.raises(TemplateError, match=pattern):
            load_yaml_template(path)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("broken_yaml_stages", None)
