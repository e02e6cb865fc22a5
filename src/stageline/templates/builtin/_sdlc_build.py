"""The build half of the ``sdlc`` template (seed 002): build -> dispatch -> verify.

After an approved plan, ``build`` runs a harness on a new branch in a git worktree of the
target repository and commits what it changed; ``dispatch`` runs the repository's CI command
(the first line of the ``.stageline-ci`` file in the repository's checkout, which the agent
never touches, or a ``ci_command`` service given in code; a run input never chooses a command)
as a subprocess and keeps its log under a CI run id; ``verify`` reads that run's conclusion.
A pass goes to ``approved`` (a commit on the branch and a pull-request summary), then to the
``apply`` gate: a person approves bringing the branch's changes into the checkout (or the
``apply`` input, ``--apply``, does it at once); rejecting leaves them on the branch. A failure
goes back to ``build`` with the CI output as feedback, at most ``MAX_BUILDS`` builds, then
``build_parked`` (a park gate; nothing is applied).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from stageline.errors import InputError
from stageline.harnesses import HarnessResult
from stageline.operations import (
    FailurePhase,
    OperationContext,
    OperationInputs,
    PostStep,
    add_apply,
    apply_changes,
    operation_stage,
)
from stageline.stages import StageContext, stage
from stageline.templates._builder import END, Template
from stageline.templates._park import add_park
from stageline.templates.builtin._checks import git_folder, harness_spec, path_input
from stageline.templates.builtin._sdlc_forge import (
    forge_inputs,
    forge_mode,
    forge_publish,
    open_pull_request,
    push_and_wait,
    verify_forge,
)

__all__ = [
    "CI_FILE",
    "MAX_BUILDS",
    "SERVICE_CI_COMMAND",
    "BuildInputs",
    "add_build_half",
    "route_verify",
]

MAX_BUILDS = 3
CI_FILE = ".stageline-ci"
SERVICE_CI_COMMAND = "ci_command"
"""``services[SERVICE_CI_COMMAND]``: the CI command, from code (overrides ``.stageline-ci``)."""
CI_TIMEOUT = 900.0
FEEDBACK_LINES = 60


class BuildInputs(OperationInputs, total=False):
    """The state keys of the build half (the plan half's state extends this)."""

    ci_command: str
    """Refused: inputs never choose a command (use ``.stageline-ci`` or the service)."""
    ci_timeout: float
    build_round: int
    ci_run_id: str
    ci_log_path: str
    ci_conclusion: str
    build_feedback: str
    """What the last CI run said, for the next build to fix."""
    pr_summary_path: str
    forge_repo: str
    """Forge mode: ``OWNER/NAME``, one of ``[github.repositories]`` (see ``_sdlc_forge``)."""
    issue_number: int
    """Forge mode: the issue the task came from, if any."""
    ci_url: str
    ci_kind: str
    ci_timed_out_after: float
    """Forge mode: seconds CI was waited for without reporting (``[github] ci_timeout``); 0
    when it reported."""
    pushed_sha: str
    pr_url: str
    pr_number: int
    pr_node_id: str
    pr_state: str
    """``draft``, ``ready`` or ``merged``."""
    apply_action: str
    """Forge mode: what approving the ``apply`` gate does to the pull request."""


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["failed"])[-1]
        raise RuntimeError(f"git {args[0]} in {cwd}: {why}")
    return done.stdout.strip()


def _target(state: Any) -> Path:
    given = state.get("repo")
    if not given:
        raise InputError("the build needs a `repo` input: a local git repository")
    path = Path(str(given)).expanduser()
    return (path if path.is_absolute() else Path.cwd() / path).resolve()


# -- build ----------------------------------------------------------------------------------


def _prepare(state: Any, op: OperationContext) -> dict[str, Any]:
    """source_preparation: the build round (the operation already works in the run's
    worktree, on its branch)."""
    branch = op.isolation.branch if op.isolation is not None else "(the checkout's)"
    return {"branch": branch, "round": int(state.get("build_round") or 0) + 1}


def _prompt(state: Any, op: OperationContext) -> str:
    text = (
        f"Implement this task in the repository (branch {op.prepared['branch']} is checked "
        f"out): {state['task']}\n\nThe approved plan:\n{state.get('plan', '-')}\n"
    )
    if state.get("build_feedback"):
        text += f"\nThe last CI run failed; fix what it reports:\n{state['build_feedback']}\n"
    return text + (
        "\nRules: change only what the task needs; run the tests; do not commit "
        "(stageline commits your changes). End with a one-line summary."
    )


def _script(state: Any, op: OperationContext) -> list[dict[str, Any]]:
    """Offline: record the task in CHANGELOG.md, a change that keeps the tests passing."""
    log = op.repo / "CHANGELOG.md"
    before = log.read_text(encoding="utf-8") if log.exists() else "# Changelog\n\n"
    line = f"- {state['task']} (stageline run {op.run_id}, build {op.prepared['round']})\n"
    summary = f"recorded the task in CHANGELOG.md (build {op.prepared['round']})"
    return [
        {"event": {"type": "message", "text": f"Working on: {state['task']}"}},
        {"write": "CHANGELOG.md", "content": before.rstrip("\n") + "\n" + line},
        {"event": {"type": "result", "status": "succeeded", "summary": summary}},
    ]


def _round(state: Any, op: OperationContext, result: HarnessResult) -> dict[str, Any]:
    return {"build_round": op.prepared["round"]}


def _message(state: Any, op: OperationContext, result: HarnessResult) -> str:
    """The build's commit on the branch (nothing changed: no new commit)."""
    round_no = op.prepared["round"]
    return f"{state['task']}\n\n{result.summary}\n\nstageline run {op.run_id}, build {round_no}"


build = operation_stage(
    "sdlc_build",
    prompt=_prompt,
    repo=_target,
    prepare=_prepare,
    script=_script,
    post_steps=(PostStep(name="round", phase=FailurePhase.VALIDATION, run=_round),),
    title=lambda s: f"build: {s['task']}",
    commit_message=_message,
)


# -- dispatch and verify --------------------------------------------------------------------


def _ci_command(state: Any, services: Any) -> str:
    """The command from code, else from the repository's checkout: never from the inputs (a
    run may be started by anyone who can reach the API), nor from the worktree (the agent,
    whose script may come from the inputs, writes there)."""
    given = services.get(SERVICE_CI_COMMAND)
    if given:
        return str(given)
    if state.get("ci_command"):
        raise InputError(
            f"the ci_command input is refused: a run's inputs never choose a "
            f"command to run; commit the command to the repository's {CI_FILE} "
            "file, or pass it from code as the `ci_command` service"
        )
    path = _target(state) / CI_FILE
    lines = [ln.strip() for ln in path.read_text().splitlines()] if path.is_file() else []
    found = next((ln for ln in lines if ln and not ln.startswith("#")), "")
    if not found:
        raise InputError(f"no CI command: add {CI_FILE} to the repository {path.parent}")
    return found


@stage(name="sdlc.dispatch", capability="ci", cost_class="low")
async def dispatch(state: Any, ctx: StageContext) -> dict[str, Any]:
    """Run the CI command in the worktree; its log and conclusion are kept under a run id
    (forge mode: push the branch, start CI on GitHub, and wait for it)."""
    if forge_mode(state):
        return await push_and_wait(state, ctx)
    worktree = Path(state["worktree"])
    command = _ci_command(state, ctx.services)
    ci_run_id = f"{ctx.run_id}-ci{state.get('build_round', 1)}"
    folder = ctx.run_dir / "ci"
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / f"{ci_run_id}.log"
    timeout = float(state.get("ci_timeout") or CI_TIMEOUT)
    started = time.time()
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_shell(
            command,
            cwd=worktree,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code: int | None = await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            code = None
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever the command left behind
            await proc.wait()
    conclusion = "success" if code == 0 else "timed_out" if code is None else "failure"
    record = {
        "ci_run_id": ci_run_id,
        "command": command,
        "exit_code": code,
        "conclusion": conclusion,
        "commit": state.get("commit"),
        "started": started,
        "finished": time.time(),
        "log": str(log_path),
    }
    (folder / f"{ci_run_id}.json").write_text(json.dumps(record, indent=2))
    ctx.metric("ci_seconds", record["finished"] - started)
    ctx.log.info(f"CI run {ci_run_id}: {conclusion}", ci_run_id=ci_run_id, command=command)
    return {"ci_run_id": ci_run_id, "ci_log_path": str(log_path)}


@stage(name="sdlc.verify", capability="review", cost_class="none")
async def verify(state: Any, ctx: StageContext) -> dict[str, Any]:
    """Read the CI run's conclusion; a failure becomes the next build's feedback."""
    if forge_mode(state):
        return await verify_forge(state, ctx)
    record = json.loads((ctx.run_dir / "ci" / f"{state['ci_run_id']}.json").read_text())
    if record["conclusion"] == "success":
        return {"ci_conclusion": "success", "build_feedback": ""}
    tail = Path(record["log"]).read_text(errors="replace").splitlines()[-FEEDBACK_LINES:]
    feedback = (
        f"CI run {record['ci_run_id']} (`{record['command']}`) ended "
        f"{record['conclusion']} (exit code {record['exit_code']}):\n" + "\n".join(tail)
    )
    ctx.log.warning(
        f"CI run {record['ci_run_id']}: {record['conclusion']}; back to build",
        ci_run_id=record["ci_run_id"],
    )
    return {"ci_conclusion": record["conclusion"], "build_feedback": feedback}


def route_verify(state: Any) -> str:
    return "approved" if state.get("ci_conclusion") == "success" else "build"


def _route_plan(state: Any) -> str:
    return "build" if state.get("repo") else "end"


def _write(ctx: StageContext, name: str, text: str) -> str:
    path = ctx.run_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


@stage(name="sdlc.approved", capability="publish", cost_class="none")
async def approved(state: Any, ctx: StageContext) -> dict[str, Any]:
    """A summary ready for a pull request of the branch (forge mode: a draft pull request)."""
    if forge_mode(state):
        return await open_pull_request(state, ctx)
    base, commit = state.get("base_commit", ""), state.get("commit", "")
    stat = _git(Path(state["worktree"]), "diff", "--stat", f"{base}..{commit}") if base else ""
    text = "\n".join(
        [
            f"# {state['task']}",
            "",
            f"Branch `{state.get('branch')}` at {commit[:12]}, onto {base[:12]}.",
            "",
            "## Summary",
            "",
            state.get("summary") or "-",
            "",
            "## Changes",
            "",
            "```",
            stat or "(no changes)",
            "```",
            "",
            "## Verification",
            "",
            f"CI run {state.get('ci_run_id')} passed after {state.get('build_round', 1)} build(s); "
            f"log: {state.get('ci_log_path')}",
            "",
            "## Plan",
            "",
            state.get("plan") or "-",
            "",
        ]
    )
    ctx.log.info("approved: pull request summary written", branch=state.get("branch"))
    return {"outcome": "approved", "pr_summary_path": _write(ctx, "pull_request.md", text)}


@stage(name="sdlc.apply", capability="publish", cost_class="none")
async def apply(state: Any, ctx: StageContext) -> dict[str, Any]:
    """Bring the branch's changes into the checkout (forge mode: the pull request is marked
    ready for review, and merged where the repository allows)."""
    if forge_mode(state):
        return await forge_publish(state, ctx)
    done: dict[str, Any] = await apply_changes.fn(state, ctx)  # type: ignore[misc]
    return done


@stage(name="sdlc.build_parked", capability="escalation", cost_class="none")
async def build_parked(state: Any, ctx: StageContext) -> dict[str, Any]:
    """The end of a run whose builds ran out of rounds: a summary for a person."""
    ctx.log.warning(
        f"parked: CI still failing after {MAX_BUILDS} builds", branch=state.get("branch")
    )
    text = (
        f"# Parked: {state['task']}\n\nCI still fails after {MAX_BUILDS} builds on branch "
        f"`{state.get('branch')}`; a person decides next.\n\n"
        f"## Last CI output\n\n```\n{state.get('build_feedback', '')}\n```\n"
    )
    return {"outcome": "parked", "pr_summary_path": _write(ctx, "parked.md", text)}


def add_build_half(template: Template, *, after: str = "plan_approved") -> Template:
    """Wire build -> dispatch -> verify after ``after``; runs with no ``repo`` end there. A
    verified build waits at the ``apply`` gate (unless the ``apply`` input), then its branch's
    changes come into the checkout; a parked one never reaches it."""
    template.add_stage("build", build).add_stage("dispatch", dispatch)
    template.add_stage("verify", verify).add_stage("approved", approved)
    template.add_stage("build_parked", build_parked)
    template.add_route(after, _route_plan, {"build": "build", "end": END})
    template.add_sequence("build", "dispatch", "verify")
    template.add_route("verify", route_verify, {"approved": "approved", "build": "build"})
    # A person brings the verified branch in (forge mode: publishes the pull request).
    add_apply(
        template,
        after="approved",
        apply=apply,
        show=("branch", "changes", "pr_url", "apply_action"),
    )
    template.add_loop(
        "build_verify", head="build", max_iterations=MAX_BUILDS, on_exhausted="build_parked"
    )
    template.add_input_check(forge_inputs, settings=True)  # fills `repo` in forge mode
    template.add_input_check(path_input("repo", kind="folder"))
    template.add_input_check(git_folder("repo", needs_commit=True))
    template.add_input_check(harness_spec)
    template.add_edge("build_parked", "build_rounds")
    add_park(
        template,
        "build_rounds",
        loop="build_verify",
        head="build",
        rounds=MAX_BUILDS,
        feedback_key="build_feedback",
        show=["branch", "build_feedback"],
    )
    return template
