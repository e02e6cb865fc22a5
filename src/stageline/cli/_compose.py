"""``stageline compose GOAL``: a YAML template for a goal, over the stage catalog, checked."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from stageline.cli._config import load_settings
from stageline.cli._render import print_json
from stageline.errors import ConflictError, UsageError

if TYPE_CHECKING:
    from stageline.templates import CatalogEntry

__all__ = ["compose"]


def compose(
    goal: Annotated[str, typer.Argument(metavar="GOAL", help="What the pipeline is for.")],
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="Where to write the template (.yaml); default: the project's templates "
            "folder, named after the goal.",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            metavar="SPEC",
            help="Let this chat model draft it (e.g. openai:gpt-4o): a run of the built-in "
            "`compose` template; each failed check goes back to the model.",
        ),
    ] = None,
    approve: Annotated[
        bool, typer.Option("--approve", help="With --model: wait for approval before writing.")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace a file that exists.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Compose a pipeline for GOAL from the stage catalog: write it as a YAML template, check
    it as any template is checked, and print its graph. Offline (the default) a deterministic
    composer plans it; a goal that needs a capability no stage has exits 2, naming it and the
    closest stages, and nothing is written. With --model the model drafts it, in a run."""
    from stageline.architect import compose_goal, template_name, templates_folder
    from stageline.templates import build_catalog, use_project

    if not goal.strip():
        raise UsageError("the goal is empty: say what the pipeline is for")
    settings = load_settings()
    use_project(settings)
    catalog = build_catalog(settings.root, settings.template_dirs)
    folder = templates_folder(settings)
    target = Path(output) if output else None
    if target is not None and target.suffix not in (".yaml", ".yml"):
        raise UsageError(f"--output {output}: a YAML template file ends in .yaml or .yml")
    if model is not None:
        if target is None:
            target = folder / f"{template_name(goal)}.yaml"
        if target.exists() and not force:
            raise ConflictError(
                f"{target} exists; replace it with force (--force), or name another"
            )
        _with_model(goal, catalog, target, model, approve, as_json)
        return
    if approve:
        raise UsageError(
            "--approve waits for a person before a model's draft is written; it needs --model"
        )
    made = compose_goal(goal, catalog, folder=folder, target=target, force=force)
    if as_json:
        print_json(made.to_dict())
        return
    typer.echo(f"wrote {made.path} (template {made.name}); it passed the template checks")
    typer.echo(made.mermaid.rstrip("\n"))
    inputs = " ".join(f'-i {k}="{made.example.get(k, "...")}"' for k in made.inputs)
    typer.echo(f"run it: stageline run {made.path} {inputs}".rstrip())


def _with_model(
    goal: str,
    catalog: list[CatalogEntry],
    target: Path,
    spec: str,
    approve: bool,
    as_json: bool,
) -> None:
    """Run the built-in ``compose`` template with ``spec`` as its model; exit as the run ends."""
    from stageline.architect import compose_with_model
    from stageline.cli._aio import run_async
    from stageline.cli._codes import exit_code_for
    from stageline.ledger import RunStatus
    from stageline.llm import chat_model

    settings = load_settings()
    summary = run_async(
        compose_with_model(
            goal,
            catalog,
            target=target,
            model=chat_model(spec),
            settings=settings,
            approve=approve,
        )
    )
    run_id, status = summary.run.run_id, summary.status
    rounds = summary.state.get("rounds") or []
    if as_json:
        print_json(
            {
                "run_id": run_id,
                "status": str(status),
                "path": summary.state.get("path"),
                "rounds": rounds,
            }
        )
    elif status is RunStatus.SUCCEEDED:
        typer.echo(f"wrote {target} in {len(rounds)} round(s) (run {run_id}); it passed the checks")
    elif status is RunStatus.WAITING:
        typer.echo(f"the draft passed the checks; approve it to write {target}:")
        typer.echo(f"  stageline approve {run_id}   (or: stageline changes {run_id} --note ...)")
    else:
        failed = next((r.error for r in reversed(summary.records) if r.error), None)
        typer.echo(f"run {run_id} {status}: {failed or 'see stageline show ' + run_id}", err=True)
    raise typer.Exit(exit_code_for(status))
