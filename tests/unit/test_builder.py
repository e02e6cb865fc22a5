"""The template builder: validation errors that point at the offending line, and versions."""

from __future__ import annotations

import operator
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from stageline.errors import TemplateError
from stageline.stages import StageContext, stage
from stageline.templates import Template


class S(TypedDict, total=False):
    n: int
    trail: Annotated[list[str], operator.add]


async def a(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"n": 1}


async def b(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"n": 2}


async def c(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"n": 3}


def next_line() -> int:
    """The line after the caller's: where the call under test is."""
    return sys._getframe(1).f_lineno + 1


def abc(name: str = "abc") -> Template:
    return Template(name, state=S).add_stage("a", a).add_stage("b", b).add_stage("c", c)


def this_file() -> str:
    """This module's file as its code names it, as tracebacks do: ``__file__``, unless the code
    was compiled at another path and copied since (pytest's cached bytecode in a copy of the
    tests, as mutmut's ``mutants/`` is)."""
    return sys._getframe().f_code.co_filename


def assert_points_here(error: pytest.ExceptionInfo[TemplateError], line: int) -> None:
    """The error names this file (the caller's, not stageline's) and the line of the call."""
    source = error.value.source
    assert source == this_file()
    assert Path(source).parts[-3:] == Path(__file__).parts[-3:]  # tests/unit/test_builder.py
    assert error.value.line == line
    assert f"{source}:{line}: " in str(error.value)


def test_a_route_to_a_missing_node_names_the_route_call() -> None:
    template = abc().add_sequence("a", "b", "c")
    line = next_line()
    template.add_route("b", lambda s: "go", {"go": "nowhere", "done": "c"})
    with pytest.raises(TemplateError, match="route to 'nowhere' is not a node") as error:
        template.validate()
    assert_points_here(error, line)
    assert "a, b, c" in str(error.value)  # lists the nodes there are


def test_an_edge_to_a_missing_node_names_the_edge_call() -> None:
    template = abc().add_sequence("a", "b", "c")
    line = next_line()
    template.add_edge("c", "d")
    with pytest.raises(TemplateError, match="edge to 'd'") as error:
        template.build()
    assert_points_here(error, line)


def test_an_unreachable_node_names_where_it_was_added() -> None:
    template = Template("t", state=S).add_stage("a", a).add_stage("b", b)
    line = next_line()
    template.add_stage("c", c)
    template.add_edge("a", "b")
    with pytest.raises(TemplateError, match="'c' is unreachable from the start node 'a'") as error:
        template.validate()
    assert_points_here(error, line)


def test_an_unbounded_loop_names_the_call_that_closes_it() -> None:
    template = abc().add_edge("a", "b")
    line = next_line()
    template.add_route("b", lambda s: "again", {"again": "a", "done": "c"})
    with pytest.raises(TemplateError, match="loop through a -> b has no declared bound") as error:
        template.validate()
    assert_points_here(error, line)
    template.add_loop("review", head="a", max_iterations=3)
    template.validate()  # declared: fine


def test_an_unbounded_loop_of_plain_edges_names_the_back_edge() -> None:
    template = abc().add_edge("a", "b").add_edge("b", "c")
    line = next_line()
    template.add_edge("c", "b")
    with pytest.raises(TemplateError, match="loop through b -> c") as error:
        template.validate()
    assert_points_here(error, line)


def test_a_node_defined_twice_names_the_second_definition() -> None:
    template = abc()
    line = next_line()
    with pytest.raises(TemplateError, match="node 'b' is defined twice") as error:
        template.add_stage("b", c)
    assert_points_here(error, line + 1)


def test_a_loop_needs_a_positive_bound() -> None:
    template = abc()
    line = next_line()
    with pytest.raises(TemplateError, match="bound of at least 1") as error:
        template.add_loop("review", head="a", max_iterations=0)
    assert_points_here(error, line + 1)


def test_a_template_without_stages_is_refused() -> None:
    with pytest.raises(TemplateError, match="has no stages"):
        Template("empty", state=S).validate()


# -- versions ---------------------------------------------------------------------------------


def test_the_same_template_built_twice_has_the_same_version() -> None:
    one = abc().add_sequence("a", "b", "c")
    two = abc().add_sequence("a", "b", "c")
    assert one.full_version == two.full_version
    assert one.full_version.startswith("1+")


def test_full_version_changes_when_an_edge_changes() -> None:
    base = abc().add_sequence("a", "b", "c")
    rewired = abc().add_sequence("a", "c", "b")
    assert base.full_version != rewired.full_version

    template = abc().add_sequence("a", "b", "c")
    before = template.full_version
    template.add_edge("a", "c")
    assert template.full_version != before  # the cached digest is dropped on change


async def b_changed(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"n": 20}


def test_full_version_changes_when_a_stage_changes_its_code() -> None:
    base = abc().add_sequence("a", "b", "c")
    changed = Template("abc", state=S).add_stage("a", a).add_stage("b", b_changed)
    changed.add_stage("c", c).add_sequence("a", "b", "c")
    assert base.full_version != changed.full_version


def test_full_version_changes_with_stage_options_and_the_version_string() -> None:
    def with_retry(attempts: int) -> Template:
        made = Template("abc", state=S).add_stage("a", stage(a, retry=attempts, register=False))
        return made.add_stage("b", b).add_stage("c", c).add_sequence("a", "b", "c")

    assert with_retry(2).full_version == with_retry(2).full_version
    assert with_retry(2).full_version != with_retry(3).full_version
    base = abc().add_sequence("a", "b", "c")
    bumped = Template("abc", state=S, version="2").add_stage("a", a).add_stage("b", b)
    bumped.add_stage("c", c).add_sequence("a", "b", "c")
    assert bumped.full_version.startswith("2+")
    assert bumped.full_version.split("+")[1] == base.full_version.split("+")[1]
