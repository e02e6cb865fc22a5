"""Which template versions a run may go on with: the same code, or, for a built-in template,
the same declared version (stageline's own code changes with its releases)."""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

from stageline.templates import Template, load_template, runs_on


class S(TypedDict, total=False):
    text: str


def work(state: S, ctx: Any) -> dict[str, Any]:
    return {"text": "done"}


def other_work(state: S, ctx: Any) -> dict[str, Any]:
    return {"text": "done differently"}


def gated(*, deadline: str = "1d", step: Any = work) -> Template:
    template = Template("gated", state=S, version="1").add_stage("work", step)
    template.add_gate("review", deadline=deadline)
    return template.add_sequence("work", "review")


def with_gate_code(template: Template, fn: Any) -> Template:
    """The template as a later stageline whose gate node runs other code would make it."""
    node = template._nodes["review"]
    template._nodes["review"] = dataclasses.replace(node, stage=node.stage.with_options(fn=fn))
    return template


def test_a_gate_counts_by_its_options_not_by_stagelines_code() -> None:
    before = gated().digest
    assert with_gate_code(gated(), other_work).digest == before
    assert gated(deadline="2d").digest != before
    assert gated(step=other_work).digest != before  # the template's own code still counts


def test_a_users_template_goes_on_only_with_the_same_code() -> None:
    made = gated()
    assert runs_on(made, "gated", made.full_version)
    assert not runs_on(made, "gated", "1+000000000000")


def test_a_builtin_template_goes_on_with_the_same_declared_version() -> None:
    made = load_template("blog_post")
    assert runs_on(made, "blog_post", made.full_version)
    assert runs_on(made, "blog_post", f"{made.version}+000000000000")
    assert not runs_on(made, "blog_post", f"{made.version}0+{made.digest}")
    # A file or project template that merely shares a built-in's declared version does not.
    assert not runs_on(made, "my/blog_post.py", f"{made.version}+000000000000")
