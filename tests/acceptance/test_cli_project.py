"""Stages named in YAML are found in the user's project: a real project folder, the CLI as a
subprocess run from inside it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

Cli = Callable[..., subprocess.CompletedProcess[str]]

PLAIN = """
async def draft(state, ctx):
    return {"text": state["topic"] + " drafted"}
"""

STAGES = """
from stageline import stage


@stage(name="blog.polish")
async def polish(state, ctx):
    return {"text": state["text"] + ", polished"}
"""

HELPERS = """
from stageline import stage


@stage(name="team.sign")
async def sign(state, ctx):
    return {"text": state["text"] + ", signed"}
"""

PIPELINE = """
name: pipeline
state:
  topic: str
  text: str
stages:
  draft: {use: mypkg.plain:draft}
  polish: blog.polish
  sign: team.sign
edges:
  - [draft, polish]
  - [polish, sign]
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project: stageline.toml, a package of stages, a YAML template, a helper module."""
    (tmp_path / "stageline.toml").write_text('[stageline]\nstage_modules = ["mypkg.stages"]\n')
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "plain.py").write_text(PLAIN)
    (tmp_path / "mypkg" / "stages.py").write_text(STAGES)  # imported for stage_modules only
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "pipeline.yaml").write_text(PIPELINE)
    (tmp_path / "templates" / "_helpers.py").write_text(HELPERS)
    (tmp_path / "docs" / "deep").mkdir(parents=True)
    return tmp_path


def _in(folder: Path, cli_env: dict[str, str]) -> Cli:
    from subprocess import run

    def call(*args: str) -> subprocess.CompletedProcess[str]:
        done = run(
            [sys.executable, "-m", "stageline.cli", *args],
            cwd=folder,
            env=cli_env,
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=180,
            check=False,
        )
        assert "Traceback" not in done.stderr, done.stderr
        return done

    return call


def test_yaml_stages_by_import_path_and_registered_name_are_found_from_a_subfolder(
    project: Path, cli_env: dict[str, str]
) -> None:
    cli = _in(
        project / "docs" / "deep", {k: v for k, v in cli_env.items() if k != "STAGELINE_HOME"}
    )
    done = cli("run", "pipeline", "-i", "topic=News", "--run-id", "p1")
    assert done.returncode == 0, (done.stdout, done.stderr)
    shown = json.loads(cli("show", "p1", "--json").stdout)
    assert shown["state"]["text"] == "News drafted, polished, signed"
    assert (project / ".stageline" / "stageline.db").is_file()  # the root, not the subfolder
    graph = cli("graph", "pipeline")
    assert graph.returncode == 0 and "polish" in graph.stdout, graph.stderr


def test_a_registered_name_found_nowhere_is_a_usage_error_naming_file_and_line(
    project: Path, cli_env: dict[str, str]
) -> None:
    (project / "templates" / "broken.yaml").write_text(
        "name: broken\nstate:\n  text: str\nstages:\n  a: blog.nowhere\n"
    )
    done = _in(project, cli_env)("run", "broken")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "blog.nowhere" in done.stderr and "broken.yaml" in done.stderr
    assert "line 5" in done.stderr or ":5" in done.stderr


def test_a_stage_module_that_cannot_be_imported_is_named(
    project: Path, cli_env: dict[str, str]
) -> None:
    (project / "stageline.toml").write_text('[stageline]\nstage_modules = ["mypkg.missing"]\n')
    (project / "templates" / "_helpers.py").unlink()
    done = _in(project, cli_env)("run", "pipeline", "-i", "topic=x")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "mypkg.missing" in done.stderr and "stage_modules" in done.stderr
