"""``stageline compose`` (issue 27): goals of different shapes composed offline into YAML
templates that pass the template checks and run offline to the end they asked for; a goal
that needs a capability no stage has is refused (exit 2) and nothing is written."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from conftest import Cli

pytestmark = pytest.mark.timeout(300)


@dataclass(frozen=True)
class Goal:
    goal: str
    inputs: tuple[str, ...]
    code: int
    """The run's exit code: 0 done, 3 waiting at the gate or question the goal asked for."""
    shape: tuple[str, ...]
    """Top-level sections the template must have (besides name, state, stages)."""
    waits_at: str | None = None


GOALS = {
    "linear": Goal(
        "Write a blog post about durable pipelines", ("topic=durable pipelines",), 0, ("edges",)
    ),
    "one stage": Goal("Research notes about vector databases", ("topic=vectors",), 0, ()),
    "two stages": Goal("An outline for a talk about LangGraph", ("topic=LangGraph",), 0, ()),
    "critics": Goal(
        "Write a blog post about caching, reviewed by two critics",
        ("topic=caching",),
        0,
        ("fanout",),
    ),
    "revision loop": Goal(
        "Write a draft about retries, reviewed by two critics and revised at most 2 rounds",
        ("topic=retries",),
        0,
        ("fanout", "routes", "loops"),
    ),
    "gate": Goal(
        "Write a blog post about queues; an editor approves before publishing",
        ("topic=queues",),
        3,
        ("gates",),
        "gate editor_approval",
    ),
    "everything": Goal(
        "Write a blog post about durable pipelines, reviewed by two critics, revised at most "
        "2 rounds; an editor approves before publishing",
        ("topic=durable pipelines",),
        3,
        ("fanout", "routes", "loops", "gates"),
        "gate editor_approval",
    ),
    "questions": Goal(
        "Write a blog post about testing; first ask me about the audience and scope",
        ("topic=testing",),
        3,
        ("questions",),
        "stageline answer",
    ),
    "plan review loop": Goal(
        "Draft an implementation plan for adding retries, reviewed and revised up to 3 times",
        ("task=add retries to the client",),
        0,
        ("routes", "loops"),
    ),
    "plan questions gate": Goal(
        "An implementation plan for a cache layer; ask about scope first; the tech lead approves",
        ("task=a cache layer",),
        3,
        ("questions", "gates"),
        "stageline answer",
    ),
    "repository": Goal("Build a wiki for this repository", ("wiki=wiki",), 0, ()),
}

IMPOSSIBLE = {
    "Translate the README into French": ("translation", "blog.draft"),
    "Write a blog post about queues and email it to the team": ("notification", "blog.publish"),
    "Compose a symphony for strings": ("symphony", "blog.draft"),
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git repository with one commit: the repository goal's agent works on it."""

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "README.md").write_text("# calc\n\nAdds numbers.\n")
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git("add", ".")
    git("-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "init")
    return tmp_path


@pytest.mark.parametrize("shape", GOALS)
def test_a_goal_composes_into_a_template_that_runs_offline_to_its_end(
    cli: Cli, project: Path, shape: str
) -> None:
    goal = GOALS[shape]
    done = cli("compose", goal.goal, "-o", "composed.yaml")
    assert done.returncode == 0, done.stderr
    assert "passed the template checks" in done.stdout and "graph TD" in done.stdout
    written = yaml.safe_load((project / "composed.yaml").read_text())
    assert set(goal.shape) <= set(written), sorted(written)
    assert cli("graph", "composed.yaml").returncode == 0  # the same checks, in a new process
    args = [a for i in goal.inputs for a in ("-i", i)]
    ran = cli("run", "composed.yaml", *args)
    assert ran.returncode == goal.code, (ran.stdout, ran.stderr)
    if goal.waits_at:
        assert goal.waits_at in ran.stdout


@pytest.mark.parametrize("goal", IMPOSSIBLE)
def test_a_goal_no_stage_can_do_is_refused_and_nothing_is_written(
    cli: Cli, project: Path, goal: str
) -> None:
    missing, near = IMPOSSIBLE[goal]
    before = sorted(p.name for p in project.rglob("*") if ".git" not in p.parts)
    done = cli("compose", goal, "-o", "nope.yaml")
    assert done.returncode == 2
    assert f"'{missing}'" in done.stderr and near in done.stderr, done.stderr
    assert sorted(p.name for p in project.rglob("*") if ".git" not in p.parts) == before


def test_compose_writes_to_the_templates_folder_and_runs_by_name(cli: Cli, project: Path) -> None:
    done = cli("compose", "Research notes about queues", "--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    assert made["path"] == str(project / "templates" / f"{made['name']}.yaml")
    assert made["inputs"] == ["topic"] and made["example"] == {"topic": "queues"}
    assert "research" in made["mermaid"]
    again = cli("compose", "Research notes about queues")
    assert again.returncode == 4 and "--force" in again.stderr  # a conflict: the file exists
    assert cli("compose", "Research notes about queues", "--force").returncode == 0
    assert cli("run", made["name"], "-i", "topic=queues").returncode == 0


def test_with_a_model_the_rounds_are_a_run_and_a_draft_that_never_passes_writes_nothing(
    cli: Cli, project: Path
) -> None:
    # The offline model writes prose, never a template: three rounds, each checked and failed.
    done = cli("compose", "Research notes about queues", "--model", "offline", "-o", "r.yaml")
    assert done.returncode == 1
    assert "no draft passed the template checks in 3 rounds" in done.stderr
    assert "r.yaml:" in done.stderr and not (project / "r.yaml").exists()
    runs = json.loads(cli("runs", "--json").stdout)
    assert [(r["template"], r["status"]) for r in runs] == [("compose", "failed")]
    assert cli("compose", "Research notes about queues", "--approve").returncode == 2


ALTERNATIVES = '''
from stageline.stages import stage


@stage(name="my.draft_fast", capability="writing", cost_class="low")
async def draft_fast(state, ctx):
    """A short draft, fast."""
    return {"draft": f"A short note on {state['topic']}."}


@stage(name="my.draft_careful", capability="writing", cost_class="medium")
async def draft_careful(state, ctx):
    """A longer draft, careful."""
    return {"draft": f"A careful essay on {state['topic']}, with sources."}
'''


def test_where_the_catalog_has_alternatives_a_learned_router_chooses_by_outcomes(
    cli: Cli, project: Path
) -> None:
    (project / "mystages.py").write_text(ALTERNATIVES)
    (project / "stageline.toml").write_text('stage_modules = ["mystages"]\n')
    listed = json.loads(cli("stages", "--capability", "writing", "--json").stdout)
    assert {e["ref"]: e["origin"] for e in listed}["my.draft_fast"] == "project"
    done = cli("compose", "Write a blog post about routers", "-o", "routed.yaml")
    assert done.returncode == 0, done.stderr
    draft = yaml.safe_load((project / "routed.yaml").read_text())["stages"]["draft"]
    assert draft["capability"] == "writing"
    assert set(draft["use"]) == {
        "stageline.templates.builtin.blog_post:draft",
        "my.draft_fast",
        "my.draft_careful",
    }
    for _ in range(3):
        assert cli("run", "routed.yaml", "-i", "topic=routers").returncode == 0
    stats = json.loads(cli("stats", "--json").stdout)
    (node,) = [n for n in stats["nodes"] if n["node"] == "draft"]
    assert sum(a["count"] for a in node["alternatives"]) == 3
