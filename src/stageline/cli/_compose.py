"""``stageline compose GOAL``: a YAML template for a goal, over the stage catalog, checked."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stageline.cli._config import load_settings
from stageline.cli._render import print_json
from stageline.errors import UsageError

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
    force: Annotated[bool, typer.Option("--force", help="Replace a file that exists.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Compose a pipeline for GOAL from the stage catalog, offline: write it as a YAML
    template, check it as any template is checked, and print its graph. A goal that needs a
    capability no stage has exits 2, naming it and the closest stages; nothing is written."""
    from stageline.architect import compose_offline, plan_goal, read_goal
    from stageline.templates import build_catalog, use_project

    if not goal.strip():
        raise UsageError("the goal is empty: say what the pipeline is for")
    settings = load_settings()
    use_project(settings)
    catalog = build_catalog(settings.root, settings.template_dirs)
    folder = next((d for d in settings.template_dirs if d.suffix != ".json"), settings.root)
    target = Path(output) if output else None
    if target is not None and target.suffix not in (".yaml", ".yml"):
        raise UsageError(f"--output {output}: a YAML template file ends in .yaml or .yml")
    if target is None:
        target = folder / f"{plan_goal(read_goal(goal), catalog).name}.yaml"
    if target.exists() and not force:
        raise UsageError(f"{target} exists; pass --force to replace it, or -o another file")
    made = compose_offline(goal, catalog, target=target, folder=folder)
    if as_json:
        print_json(made.to_dict())
        return
    typer.echo(f"wrote {made.path} (template {made.name}); it passed the template checks")
    typer.echo(made.mermaid.rstrip("\n"))
    inputs = " ".join(f'-i {k}="{made.example.get(k, "...")}"' for k in made.inputs)
    typer.echo(f"run it: stageline run {made.path} {inputs}".rstrip())
