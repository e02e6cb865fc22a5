"""The ``gates:`` and ``questions:`` sections of YAML templates: loaded, run, mistakes located."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from stageline.config import Settings
from stageline.errors import InvalidTransition, TemplateError
from stageline.ledger import RunStatus, WaitKind
from stageline.templates._yaml import load_yaml_template
from stageline.testing import memory_runner

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))

GATED = """\
name: yaml_gated
state:
  topic: str
  draft: str
  feedback: str
  qa_history: list
  answers: dict
stages:
  draft: yaml_gate_stages:draft
start: clarify
questions:
  clarify:
    questions:
      - {id: audience, text: "Who reads it?", choices: [devs, ops], default: devs}
      - {id: limits, text: "Any limits?", schema: {type: object}, required: false}
    answers: answers
    deadline: 2h
    on_deadline: default
gates:
  approval: {changes_to: draft, max_changes: 1, show: [draft], deadline: 1d,
             on_deadline: [escalate, reject]}
edges:
  - [clarify, draft]
  - [draft, approval]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(textwrap.dedent(text))
    return path


async def test_a_yaml_template_with_a_question_and_a_gate_runs(
    tmp_path: Path, memory_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "yaml_gate_stages.py").write_text(
        "async def draft(state, ctx):\n"
        "    return {'draft': f\"for {state['answers']['audience']}: {state.get('feedback')}\"}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    template = load_yaml_template(write(tmp_path, GATED))
    assert template.nodes == ["draft", "approval", "clarify"]
    gate = template.gates["approval"]
    assert (gate.changes_to, gate.deadline, gate.on_deadline) == (
        "draft",
        86400.0,
        ("escalate", "reject"),
    )
    asked = template.questions["clarify"]
    assert (asked.deadline, asked.on_deadline) == (7200.0, ("remind", "escalate", "default"))
    async with memory_runner(memory_settings) as runner:
        first = await runner.start(template, {"topic": "yaml"})
        [question] = first.waiting
        assert question.kind is WaitKind.QUESTION
        at_gate = await runner.answer(first.run.run_id, {"audience": "ops"})
        [wait] = at_gate.waiting
        assert wait.name == "approval" and "draft" in wait.payload["show"]
        assert at_gate.state["answers"] == {"audience": "ops"}
        changed = await runner.request_changes(first.run.run_id, note="more")
        assert changed.state["feedback"] == "more"
        done = await runner.approve(first.run.run_id)
        assert done.status is RunStatus.SUCCEEDED


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("gates:\n  g: {colour: red}\n", 8, "unknown key 'colour' in gate 'g'"),
        ("gates:\n  g: {on_deadline: default}\n", 8, "on_deadline for a gate"),
        ("gates:\n  g: {deadline: soon}\n", 8, "deadline must be a duration"),
        ("gates:\n  g: {changes_to: nowhere}\n", None, "'nowhere' is not a node"),
        ("gates:\n  g: {max_changes: many}\n", 8, "max_changes must be a whole number"),
        ("questions:\n  q: {}\n", 8, "takes `questions` or `ask`"),
        ("questions:\n  q: {questions: [{text: a, choices: []}]}\n", 8, "non-empty list"),
        (
            "questions:\n  q: {ask: yaml_stages:keep_max, questions: [a]}\n",
            8,
            "takes 2 positional arguments, not 3",
        ),
        ("questions:\n  q: {questions: [a], history: nope}\n", 8, "state key 'nope'"),
    ],
)
def test_mistakes_in_gates_and_questions_name_the_line(
    tmp_path: Path, text: str, line: int | None, message: str
) -> None:
    base = "name: bad\nstate:\n  feedback: str\n  qa_history: list\nstages:\n"
    head = base.replace("stages:\n", "stages:\n  a: yaml_stages:draft\n")
    with pytest.raises(TemplateError, match=message) as info:
        load_yaml_template(write(tmp_path, head + text))
    if line is not None:
        assert f"t.yaml:{line}:" in str(info.value), str(info.value)


REVIEWED = """\
name: reviewed_gate
state:
  draft: str
  feedback: str
stages:
  draft: reviewed_stages:draft
  review: reviewed_stages:review
edges:
  - [draft, review]
routes:
  - {from: review, by: "reviewed_stages:route", to: {again: draft, ok: approval}}
gates:
  approval: {changes_to: draft, max_changes: 3}
loops:                            # after the gate in the file: read before it all the same
  - {name: revisions, head: draft, max: 6}
"""
REVIEWED_STAGES = """
async def draft(state, ctx):
    return {"draft": f"draft {state.get('feedback') or ''}"}

async def review(state, ctx):
    return {}

def route(state):
    return "ok"
"""


async def test_a_gate_counts_the_changes_asked_at_it_when_its_head_has_a_loop_of_its_own(
    tmp_path: Path, memory_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``max_changes: 3`` shows 3 rounds left, then 2, 1, 0, and a fourth is refused, though
    ``draft`` heads a loop of 6 (it once showed "4 round(s) left" at every visit: the gate
    counted a loop of its own that the template's loop on ``draft`` replaced)."""
    (tmp_path / "reviewed_stages.py").write_text(REVIEWED_STAGES)
    monkeypatch.syspath_prepend(str(tmp_path))
    template = load_yaml_template(write(tmp_path, REVIEWED))
    assert [(lp.name, lp.head) for lp in template.loops] == [("revisions", "draft")]
    async with memory_runner(memory_settings) as runner:
        summary = await runner.start(template, {})
        run_id = summary.run.run_id
        left = [summary.waiting[0].payload["changes_left"]]
        for n in range(3):
            summary = await runner.request_changes(run_id, note=f"round {n + 1}")
            left.append(summary.waiting[0].payload["changes_left"])
        assert left == [3, 2, 1, 0]
        with pytest.raises(InvalidTransition, match="no rounds of changes left"):
            await runner.request_changes(run_id, note="a fourth")
        assert (await runner.approve(run_id)).state["draft"] == "draft round 3"


def test_a_loop_on_a_node_that_heads_another_is_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's runs are counted for one loop: a second loop's bound would not hold."""
    (tmp_path / "reviewed_stages.py").write_text(REVIEWED_STAGES)
    monkeypatch.syspath_prepend(str(tmp_path))
    template = load_yaml_template(write(tmp_path, REVIEWED.split("loops:")[0]))
    with pytest.raises(TemplateError, match=r"node 'draft' already heads loop 'approval\.changes'"):
        template.add_loop("revisions", head="draft", max_iterations=6)
