"""Commands for people: what waits (``pending``), deciding gates, answering questions, ``sweep``.

Each parses its arguments and calls the runner; the runner records the decision, then resumes
the run, and this command follows the run in the foreground like ``resume`` does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

import typer

from stageline.cli._aio import run_async
from stageline.cli._args import OptionalRunArg, RunArg
from stageline.cli._clock import began
from stageline.cli._config import load_settings
from stageline.cli._foreground import advance_in_foreground
from stageline.cli._inputs import parse_answers
from stageline.cli._render import console, print_json
from stageline.cli._render_waits import pending_table, waiting_lines
from stageline.errors import AnswerInvalid, UsageError
from stageline.ledger import Wait, WaitKind, open_ledger
from stageline.runner import pending_waits, waiting_on

__all__ = ["ADVANCING", "COMMANDS", "AsOpt", "ForceOpt"]

GateOpt = Annotated[
    str | None, typer.Option("--gate", metavar="GATE", help="Which gate, if it waits at several.")
]
NoteOpt = Annotated[str | None, typer.Option("--note", metavar="TEXT", help="Why; recorded.")]
AsOpt = Annotated[
    str | None,
    typer.Option("--as", metavar="NAME", help="Who decides (default: your user name)."),
]
AttemptOpt = Annotated[
    int | None,
    typer.Option(
        "--attempt",
        metavar="N",
        help="The attempt the decision is for; refused as stale if the run moved on.",
    ),
]
HashOpt = Annotated[
    str | None,
    typer.Option(
        "--state-hash",
        metavar="HASH",
        help="The state hash the decision is for (`pending --json`); refused as stale "
        "if the state changed.",
    ),
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Continue even though the template changed since.")
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON only.")]


def pending(
    run_id: OptionalRunArg = None,
    as_json: JsonFlag = False,
) -> None:
    """List what waits for a person: gates, question sets and interrupts, their age and
    deadline."""
    run_async(_pending(run_id, as_json))


async def _pending(run_id: str | None, as_json: bool) -> None:
    ci: list[Wait] = []
    async with open_ledger(load_settings().database_url) as ledger:
        if run_id is not None:
            await ledger.get_run(run_id)  # an unknown run is an error, not "nothing"
            ci = [w for w in await ledger.pending_waits(run_id=run_id) if w.kind is WaitKind.CI]
        listed = await waiting_on(ledger, run_id)
    found = [wait for wait, _ in listed]
    templates = {wait.run_id: template for wait, template in listed}
    if as_json:
        print_json([w.to_dict() for w in found])
        return
    out = console()
    if not found:
        out.print("nothing waits for a person" + (f" in run {run_id}" if run_id else ""))
        if run_id is not None:
            for line in waiting_lines(run_id, ci):  # what it waits on instead: CI
                out.print(line)
        return
    out.print(pending_table(found, templates))
    if run_id is not None:
        for line in waiting_lines(run_id, found):
            out.print(line)


def _decide(run_id: str, decision: str, **options: Any) -> None:
    """Advance RUN past its gate with ``Runner.<decision>``, bound to the visit waiting now;
    exit by where the run stopped, as every command that advances a run does (``_codes``)."""
    seen = began()  # binds the decision to the visit waiting then, not to a later one
    advance_in_foreground(
        run_id, lambda runner: getattr(runner, decision)(run_id, seen_at=seen, **options)
    )


def _gate_command(name: str, decision: str, doc: str) -> Callable[..., None]:
    """The command ``name``: the decision ``Runner.<decision>`` at a gate, help ``doc``."""

    def command(
        run_id: RunArg,
        gate: GateOpt = None,
        note: NoteOpt = None,
        actor: AsOpt = None,
        attempt: AttemptOpt = None,
        state_hash: HashOpt = None,
        force: ForceOpt = False,
    ) -> None:
        _decide(
            run_id,
            decision,
            gate=gate,
            note=note,
            actor=actor,
            attempt=attempt,
            state_hash=state_hash,
            force=force,
        )

    command.__name__ = command.__qualname__ = name
    command.__doc__ = doc
    return command


approve = _gate_command(
    "approve", "approve", "Approve the gate RUN waits at; the run goes on, followed here."
)
reject = _gate_command(
    "reject",
    "reject",
    """Reject at the gate RUN waits at: the run ends rejected, exit 1 (or takes the reject
    route, and exits by where the run stops then).""",
)
takeover = _gate_command(
    "takeover",
    "take_over",
    "Take over a parked run: it ends taken_over, its branch and worktree left to you.",
)


def changes(
    run_id: RunArg,
    note: Annotated[
        str,
        typer.Option(
            "--note", metavar="TEXT", help="What to change; the node it goes back to sees it."
        ),
    ],
    gate: GateOpt = None,
    actor: AsOpt = None,
    attempt: AttemptOpt = None,
    state_hash: HashOpt = None,
    force: ForceOpt = False,
) -> None:
    """Request changes at the gate RUN waits at: back to the gate's changes node with the note."""
    _decide(
        run_id,
        "request_changes",
        note=note,
        gate=gate,
        actor=actor,
        attempt=attempt,
        state_hash=state_hash,
        force=force,
    )


def answer(
    run_id: RunArg,
    answers: Annotated[
        list[str] | None,
        typer.Option(
            "--answer",
            "-a",
            metavar="ID=VALUE",
            help="An answer: id=value, or id:=<json>. Repeatable.",
        ),
    ] = None,
    answer_file: Annotated[
        str | None,
        typer.Option(
            "--answer-file",
            metavar="FILE",
            help="A JSON or YAML mapping of answers ('-' reads stdin); -a wins.",
        ),
    ] = None,
    question: Annotated[
        str | None,
        typer.Option(
            "--question",
            metavar="ID",
            help="Which question set (its id, or a prefix), if several wait.",
        ),
    ] = None,
    actor: AsOpt = None,
    force: ForceOpt = False,
) -> None:
    """Answer the questions RUN waits on: prompts for each, unless -a or --answer-file."""
    seen = began()
    given = parse_answers(answers or (), answer_file)
    if not given and not answer_file:
        given = _prompt(run_async(_question(run_id, question)))
    advance_in_foreground(
        run_id,
        lambda runner: runner.answer(
            run_id, given, question_id=question, actor=actor, force=force, seen_at=seen
        ),
    )


async def _question(run_id: str, question: str | None) -> Wait:
    async with open_ledger(load_settings().database_url) as ledger:
        await ledger.get_run(run_id)
        found = [
            w
            for w in await pending_waits(ledger, run_id)
            if w.kind is WaitKind.QUESTION and (question is None or w.wait_id.startswith(question))
        ]
    if not found:
        raise UsageError(
            f"run {run_id} waits on no question set" + (f" {question!r}" if question else "")
        )
    if len(found) > 1:
        raise UsageError(
            f"run {run_id} waits on {len(found)} question sets; say which with "
            "--question: " + ", ".join(w.wait_id for w in found)
        )
    return found[0]


def _prompt(wait: Wait) -> dict[str, Any]:
    """Ask each question on the terminal, again until the answer fits."""
    from stageline.stages import validate_answers

    out = console()
    out.print(f"question set {wait.wait_id} (turn {wait.payload.get('turn')})")
    given: dict[str, Any] = {}
    for q in wait.payload.get("question_set", {}).get("questions", []):
        hint = (
            f" [{' / '.join(q['choices'])}]"
            if q.get("kind") == "choice"
            else " (JSON)"
            if q.get("kind") == "json"
            else ""
        )
        default = q.get("default")
        while True:
            raw = typer.prompt(
                f"{q['text']}{hint}",
                default=None
                if default is None
                else json.dumps(default)
                if q.get("kind") == "json"
                else str(default),
                show_default=default is not None,
            )
            try:
                given.update(validate_answers([{**q, "required": True}], {q["id"]: raw}))
                break
            except AnswerInvalid as exc:
                typer.echo(f"  {exc}", err=True)
    return given


def sweep(as_json: JsonFlag = False) -> None:
    """Apply what is due at gate and question deadlines: remind, escalate, then the default."""
    done = run_async(_sweep())
    if as_json:
        print_json(done)
        return
    out = console()
    if not done:
        out.print("nothing was due")
    for entry in done:
        outcome = f" -> run {entry['outcome']}" if entry["outcome"] else ""
        out.print(f"{entry['run_id']}  {entry['kind']} {entry['name']}: {entry['step']}{outcome}")


async def _sweep() -> list[dict[str, Any]]:
    from stageline.runner import Runner

    async with Runner.open() as runner:
        return await runner.sweep()


def effect(
    run_id: RunArg,
    node: Annotated[str, typer.Argument(metavar="NODE", help="The node that ran the effect.")],
    key: Annotated[str, typer.Argument(metavar="KEY", help="The effect's key.")],
    done: Annotated[
        bool, typer.Option("--done", help="It happened: keep RESULT as its result.")
    ] = False,
    redo: Annotated[bool, typer.Option("--redo", help="It did not happen: run it again.")] = False,
    result: Annotated[
        str | None, typer.Option("--result", metavar="JSON", help="Its result, with --done.")
    ] = None,
) -> None:
    """Settle a side effect in doubt (it started, its result was never recorded)."""
    if done == redo:
        raise UsageError("say --done (it happened) or --redo (run it again)")
    try:
        value = json.loads(result) if result is not None else None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--result is not JSON: {exc}") from exc
    run_async(_effect(run_id, node, key, done, value))
    console().print(
        f"effect {key!r} of node {node!r}: "
        + ("kept as done" if done else "will run again")
        + f"; continue with `stageline retry {run_id}`"
    )


async def _effect(run_id: str, node: str, key: str, done: bool, value: Any) -> None:
    from stageline.runner import Runner

    async with Runner.open() as runner:
        await runner.ledger.get_run(run_id)
        await runner.resolve_effect(run_id, node, key, done=done, result=value)


COMMANDS = (pending, approve, reject, takeover, changes, answer, sweep, effect)
ADVANCING = (approve, reject, takeover, changes, answer)
"""The commands that advance the run they decide on, and exit by where it stopped."""
