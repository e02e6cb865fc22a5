"""The built-in ``sdlc`` template, a software team's pipeline (seed 002):

    intake -> clarify (asks a person, turn after turn, bounded) -> plan -> review
    review -> plan (revise; at most 3 plans) | plan_approval (a person) | parked
    plan_approval -> plan_approved -> build -> dispatch -> verify (see ``_sdlc_build``)
    verify -> approved -> apply (a person brings the branch into the checkout; or ``--apply``)
    parked -> plan_parked: a park gate (the run is ``parked``); a person grants more rounds

Offline by default: the clarifier's questions follow fixed rules and the offline model writes
deterministic text; with a chat model configured, the model writes the plan and the review and
may add a follow-up question.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import operator
import re
from typing import Annotated, Any, Required

from stageline.errors import InputError
from stageline.stages import StageContext, stage
from stageline.templates._builder import Template
from stageline.templates._park import add_park
from stageline.templates.builtin._sdlc_build import BuildInputs, add_build_half

__all__ = ["SdlcState", "author_questions", "template"]

MAX_PLANS = 3
MAX_TURNS = 3
DEFAULT_THRESHOLD = 0.7
PRIORITIES = ["low", "normal", "high", "urgent"]


class SdlcState(BuildInputs, total=False):
    task: Required[str]
    repo: str
    qa_history: list[dict[str, Any]]
    """Every question set the clarifier asked, with its id, turn and answers."""
    answers: dict[str, Any]
    plan: str
    plan_revision: int
    feedback: str
    """What the last review asked the next plan to fix."""
    reviews: Annotated[list[dict[str, Any]], operator.add]
    verdict: str
    review_threshold: float
    """The review score a plan needs (0 to 1); default 0.7."""
    outcome: str
    plan_path: str


async def _ask(ctx: StageContext, prompt: str, *, system: str) -> str:
    done = await ctx.model.complete(prompt, system=system)
    ctx.metric("input_tokens", done.input_tokens)
    ctx.metric("output_tokens", done.output_tokens)
    ctx.metric("llm_latency", done.latency)
    return done.text


@stage(name="sdlc.intake", capability="intake", cost_class="none")
async def intake(state: SdlcState, ctx: StageContext) -> dict[str, Any]:
    """The task, normalized; the run fails on an empty one."""
    task = " ".join((state.get("task") or "").split())
    if not task:
        raise InputError("sdlc needs a non-empty `task` input")
    ctx.log.info("task received", task=task)
    return {"task": task, "qa_history": list(state.get("qa_history") or [])}


async def author_questions(
    state: SdlcState, history: list[dict[str, Any]], ctx: StageContext
) -> list[dict[str, Any]] | None:
    """The clarifier's next question set, or None once it knows enough."""
    if not history:
        return [
            {"id": "scope", "text": f"Task: {state['task']}\nWhat is in scope, and what is not?"},
            {
                "id": "priority",
                "text": "How urgent is it?",
                "choices": PRIORITIES,
                "default": "normal",
            },
            {
                "id": "done_when",
                "text": "How will we know it is done?",
                "required": False,
                "default": "",
            },
        ]
    answered = {k: v for entry in history for k, v in entry["answers"].items()}
    if len(str(answered.get("scope", "")).split()) < 3 and "scope_detail" not in answered:
        return [
            {
                "id": "scope_detail",
                "text": "The scope is short: which parts change, and what stays out?",
            }
        ]
    if ctx.model.name != "offline" and len(history) < MAX_TURNS:
        return await _model_questions(state, answered, ctx)
    return None


async def _model_questions(
    state: SdlcState, answered: dict[str, Any], ctx: StageContext
) -> list[dict[str, Any]] | None:
    reply = await _ask(
        ctx,
        f"Task: {state['task']}\nWhat we know: {json.dumps(answered)}\n"
        "If something essential for planning is still unclear, reply with a JSON list of at "
        'most two questions as {"id": ..., "text": ...}; otherwise reply NONE.',
        system="You are a careful tech lead clarifying a task before planning it.",
    )
    found = re.search(r"\[.*\]", reply, re.DOTALL)
    if "NONE" in reply.upper() or not found:
        return None
    try:
        items = json.loads(found.group(0))
    except json.JSONDecodeError:
        return None
    questions = [
        {"id": f"extra_{i}_{q.get('id', i)}", "text": str(q["text"])}
        for i, q in enumerate(items[:2])
        if isinstance(q, dict) and q.get("text")
    ]
    return questions or None


@stage(name="sdlc.plan", capability="planning", cost_class="high", retry=2)
async def plan(state: SdlcState, ctx: StageContext) -> dict[str, Any]:
    """An implementation plan for the task, from the answers and a reviewer's feedback."""
    revision = int(state.get("plan_revision") or 0) + 1
    answers = state.get("answers") or {}
    facts = "\n".join(
        f"- {e['question_id'][:8]} {k}: {v}"
        for e in state.get("qa_history", [])
        for k, v in e["answers"].items()
        if v
    )
    prompt = (
        f"Plan the work for: {state['task']}\nRepository: {state.get('repo') or '-'}\n"
        f"Priority: {answers.get('priority', 'normal')}\nWhat the person said:\n{facts}\n"
        "Give the steps, the risks and how each step is tested."
    )
    if state.get("feedback"):
        prompt += f"\n\nThe reviewer asked for (address all of it):\n{state['feedback']}"
    body = await _ask(ctx, prompt, system="You are a senior engineer writing a short plan.")
    text = "\n".join(
        [
            f"# Plan v{revision}: {state['task']}",
            "",
            "## Scope",
            "",
            str(answers.get("scope_detail") or answers.get("scope") or "-"),
            "",
            "## Done when",
            "",
            str(answers.get("done_when") or "-"),
            "",
            "## Steps",
            "",
            body.strip(),
            "",
        ]
    )
    if state.get("feedback"):
        text += "\n## Feedback addressed\n\n" + str(state["feedback"]).strip() + "\n"
    ctx.log.info("plan written", revision=revision)
    return {"plan": text, "plan_revision": revision}


def _score(task: str, revision: int, reply: str) -> float:
    """The reviewer's ``SCORE: x`` if it gave one, else a stable score for the task's revision.

    The fallback (the offline model never scores) depends on nothing but the task and the plan's
    revision, so an offline run takes the same path wherever it runs: the plan's text holds the
    repository's path and the question ids, which differ from run to run.
    """
    found = re.search(r"score\s*[:=]\s*(0(?:\.\d+)?|1(?:\.0+)?)\b", reply, re.IGNORECASE)
    if found:
        return float(found.group(1))
    digest = hashlib.sha256(f"{task}\n{revision}".encode()).digest()
    return round(0.5 + 0.5 * int.from_bytes(digest[:4], "big") / 0xFFFFFFFF, 2)


@stage(name="sdlc.review", capability="review", cost_class="medium")
async def review(state: SdlcState, ctx: StageContext) -> dict[str, Any]:
    """A review of the plan: a verdict (approve or revise) with feedback."""
    text = state.get("plan", "")
    reply = await _ask(
        ctx,
        f"Review this plan adversarially: gaps, risks, untested steps. Give two or three "
        f"specific notes, then a line `SCORE: x` with x between 0 and 1.\n\n{text}",
        system="You are a demanding reviewer of engineering plans.",
    )
    score = _score(state["task"], int(state.get("plan_revision") or 1), reply)
    threshold = float(state.get("review_threshold", DEFAULT_THRESHOLD))
    verdict = "approve" if score >= threshold else "revise"
    ctx.metric("review_score", score)
    ctx.log.info(f"review: {verdict} ({score:.2f}, needs {threshold:.2f})", score=score)
    return {
        "verdict": verdict,
        "feedback": reply.strip() if verdict == "revise" else "",
        "reviews": [
            {
                "revision": state.get("plan_revision", 1),
                "score": score,
                "verdict": verdict,
                "notes": reply.strip(),
            }
        ],
    }


def route_review(state: SdlcState) -> str:
    return "approved" if state.get("verdict") == "approve" else "plan"


async def _write_plan(state: SdlcState, ctx: StageContext, outcome: str) -> dict[str, Any]:
    path = ctx.run_dir / "plan.md"
    note = (
        ""
        if outcome == "approved"
        else (f"\n> PARKED: no plan passed review in {MAX_PLANS} tries; a person decides next.\n")
    )
    text = state.get("plan", "") + note

    def write() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    await asyncio.to_thread(write)
    return {"outcome": outcome, "plan_path": str(path)}


@stage(name="sdlc.plan_approved", capability="publish", cost_class="none")
async def plan_approved(state: SdlcState, ctx: StageContext) -> dict[str, Any]:
    """The end of a run whose plan was approved."""
    ctx.log.info("plan approved", revision=state.get("plan_revision"))
    return await _write_plan(state, ctx, "approved")


@stage(name="sdlc.parked", capability="escalation", cost_class="none")
async def parked(state: SdlcState, ctx: StageContext) -> dict[str, Any]:
    """The end of a run whose plan ran out of review rounds."""
    ctx.log.warning("parked: the plan did not pass review", revision=state.get("plan_revision"))
    return await _write_plan(state, ctx, "parked")


template = Template(
    "sdlc",
    state=SdlcState,
    version="3",
    description="Take a task in, clarify it with a person, plan and review it, have a person "
    "approve the plan, then build it on a branch and run CI until it passes (or park); a "
    "person approves bringing the verified branch into the checkout.",
)
template.add_stage(intake)
template.add_question(
    "clarify",
    ask=author_questions,
    max_turns=MAX_TURNS,
    history_key="qa_history",
    answers_key="answers",
    deadline="1d",
    on_deadline="park",
)
template.add_stage(plan).add_stage(review).add_stage(plan_approved).add_stage(parked)
template.add_sequence("intake", "clarify", "plan", "review")
template.add_route("review", route_review, {"plan": "plan", "approved": "plan_approval"})
template.add_loop("plan_review", head="plan", max_iterations=MAX_PLANS, on_exhausted="parked")
# A person approves the reviewed plan before anything is built: approve goes on, changes send
# it back to the planner with the note, reject ends the run.
template.add_gate("plan_approval", changes_to="plan", show=["plan", "reviews"], deadline="3d")
template.add_edge("plan_approval", "plan_approved")
template.add_edge("parked", "plan_parked")
add_park(
    template,
    "plan_parked",
    loop="plan_review",
    head="plan",
    rounds=MAX_PLANS,
    show=["plan", "feedback"],
)
template.require_input("task", "what the team should do")
add_build_half(template)  # plan_approved -> build -> dispatch -> verify (when given a repo)
