"""The offline architect's parts (issue 27): reading a goal's intent, the revision route, and a
draft that fails the template checks (named by file and line, nothing written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stageline.architect import check_yaml, plan_goal, read_goal, render_plan, revise_or_go_on
from stageline.errors import CannotCompose, TemplateError
from stageline.templates import build_catalog


def test_the_intent_says_what_to_make_who_reviews_approves_and_how_many_rounds() -> None:
    intent = read_goal(
        "Write a blog post about durable pipelines, reviewed by three critics, revised at most "
        "4 rounds; the tech lead approves. Ask me about the audience and tone first."
    )
    assert intent.keys == ("draft", "post_path")
    assert (intent.reviewers, intent.rounds, intent.approver) == (3, 4, "tech lead")
    assert intent.asks and intent.ask_about == ("audience", "tone")
    assert intent.topic == "durable pipelines"
    plain = read_goal("Research notes about queues")
    assert (plain.keys, plain.reviewers, plain.rounds, plain.approver) == (
        ("research",),
        0,
        0,
        None,
    )
    assert read_goal("Build a wiki for this repository").repository
    assert read_goal("Translate the post into French").missing == (("translat", "translation"),)


def test_revise_or_go_on_follows_a_verdict_else_the_score() -> None:
    assert revise_or_go_on({"verdict": "approve"}) == "done"
    assert revise_or_go_on({"verdict": "revise", "score": 0.99}) == "revise"
    assert revise_or_go_on({"score": 0.8}) == "done"
    assert revise_or_go_on({"score": 0.8, "min_score": 0.9}) == "revise"
    assert revise_or_go_on({}) == "revise"


def test_plans_are_the_same_for_the_same_goal(tmp_path: Path) -> None:
    catalog = build_catalog(tmp_path)
    goal = read_goal("Write a blog post about x, reviewed by two critics; an editor approves")
    assert render_plan(plan_goal(goal, catalog)) == render_plan(plan_goal(goal, catalog))


def test_a_refusal_names_the_capability_and_the_closest_stages(tmp_path: Path) -> None:
    with pytest.raises(CannotCompose) as caught:
        plan_goal(read_goal("Deploy the service to production"), build_catalog(tmp_path))
    assert caught.value.missing == ["deployment"]
    assert "sdlc.dispatch" in caught.value.closest  # ci: the nearest to a deployment


def test_a_draft_that_fails_the_checks_names_file_and_line_and_writes_nothing(
    tmp_path: Path,
) -> None:
    target = tmp_path / "templates" / "bad.yaml"
    text = "name: bad\nstages:\n  a: stageline.templates.builtin.blog_post:draft\nedges:\n"
    text += "  - [a, nowhere]\n"
    with pytest.raises(TemplateError) as caught:
        check_yaml(text, target)
    assert caught.value.source == str(target) and caught.value.line == 5
    assert "nowhere" in caught.value.reason
    assert list(target.parent.iterdir()) == []


def test_a_yaml_node_with_alternatives_is_a_learned_router(tmp_path: Path) -> None:
    from stageline.templates import load_template

    good = tmp_path / "routed.yaml"
    good.write_text(
        "name: routed\nstate: {topic: str, draft: str}\nstages:\n"
        "  draft:\n    use: [stageline.templates.builtin.blog_post:draft, "
        "stageline.templates.builtin.blog_post:outline]\n    capability: writing\n"
    )
    made = load_template(str(good))
    assert made.stage_of("draft").capability == "writing"
    bad = tmp_path / "one.yaml"
    bad.write_text(
        "name: one\nstages:\n  draft:\n    use: [stageline.templates.builtin.blog_post:draft]\n"
    )
    with pytest.raises(TemplateError) as caught:
        load_template(str(bad))
    assert caught.value.line == 4 and "two or more alternatives" in caught.value.reason
