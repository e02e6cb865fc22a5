"""The stage catalog (issue 27): every stage with its capability, tier, cost, retry policy, the
keys it reads and writes (declared, from type hints or from its source) and whether it asks a
person; a stage that returns a key outside its declared writes fails its node at run time."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, TypedDict

import pytest

from stageline.cli._main import run_cli
from stageline.config import Settings
from stageline.ledger import NodeStatus, RunStatus
from stageline.runner import Runner
from stageline.stages import Stage, StageContext, infer_stage, stage
from stageline.stages import _registry as stage_registry
from stageline.templates import Template, build_catalog

pytestmark = pytest.mark.timeout(120)


class S(TypedDict, total=False):
    topic: str
    draft: str
    notes: str


class DraftOut(TypedDict, total=False):
    draft: str


# Not registered at import: every test of this worker would see them in the catalog (and the
# composer would draft with them). The one test that lists a registered stage registers it.
@stage(
    name="catalog_test.sneaky",
    capability="writing",
    cost_class="low",
    writes=["draft"],
    register=False,
)
async def sneaky(state: S, ctx: StageContext) -> dict[str, Any]:
    """Writes a draft, and notes it never declared."""
    return {"draft": f"on {state['topic']}", "notes": "undeclared"}


@stage(name="catalog_test.typed", capability="writing", register=False)
async def typed(state: S, ctx: StageContext) -> DraftOut:
    """A draft, its writes read from the return's type."""
    return {"draft": state.get("topic", ""), "notes": "not in DraftOut"}  # type: ignore[typeddict-unknown-key]


@stage(name="catalog_test.honest", capability="review", retry=3, register=False)
async def honest(state: S, ctx: StageContext) -> dict[str, Any]:
    """Reads the draft and the topic; writes notes; asks a person nothing."""
    return {"notes": f"{state['draft']} / {state.get('topic')}"}


def _one(made: Stage, name: str = "catalog") -> Template:
    return Template(name, state=S).add_stage("only", made)


async def test_a_stage_that_writes_an_undeclared_key_fails_its_node(
    sqlite_settings: Settings,
) -> None:
    async with Runner.open(sqlite_settings) as runner:
        summary = await runner.start(_one(sneaky, "sneaky"), {"topic": "x"})
    assert summary.status is RunStatus.FAILED
    (record,) = [r for r in summary.records if r.node == "only"]
    assert record.status is NodeStatus.FAILED
    assert record.failure_phase == "writes"
    assert "'notes'" in (record.error or "") and "writes: draft" in (record.error or "")
    assert "notes" not in summary.state


async def test_writes_read_from_the_return_type_are_checked_at_run_time(
    sqlite_settings: Settings,
) -> None:
    async with Runner.open(sqlite_settings) as runner:
        summary = await runner.start(_one(typed, "typed"), {"topic": "x"})
    assert summary.status is RunStatus.FAILED
    assert "'notes'" in (summary.records[0].error or "")


async def test_a_stage_within_its_declared_writes_runs(sqlite_settings: Settings) -> None:
    fine = sneaky.with_options(writes=["draft", "notes"])
    async with Runner.open(sqlite_settings) as runner:
        summary = await runner.start(_one(fine, "fine"), {"topic": "x"})
    assert summary.status is RunStatus.SUCCEEDED
    assert summary.state["notes"] == "undeclared"


def test_reads_and_writes_are_declared_typed_or_read_from_the_source() -> None:
    found = infer_stage(sneaky)
    assert (found.writes, found.writes_from) == (("draft",), "declared")
    assert (found.reads, found.reads_from) == (("topic",), "source")
    found = infer_stage(typed)
    assert (found.writes, found.writes_from) == (("draft",), "type hints")
    found = infer_stage(honest)
    assert (found.reads, found.writes) == (("draft", "topic"), ("notes",))
    assert found.writes_from == "source"
    assert not found.asks_person


def test_the_catalog_lists_builtin_and_registered_stages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # register_stage, undone after the test
    monkeypatch.setitem(stage_registry._REGISTRY, honest.name, honest)
    entries = {e.ref: e for e in build_catalog(tmp_path)}
    critic = entries["blog.critic_a"]
    assert (critic.capability, critic.tier, critic.cost_class, critic.origin) == (
        "review",
        "model",
        "medium",
        "builtin",
    )
    assert critic.writes == ("reviews",) and "draft" in critic.reads
    assert critic.description.startswith("A review of the draft")
    assert critic.templates == ("blog_post",)
    assert entries["blog.draft"].retry == {
        "max_attempts": 2,
        "initial_interval": 0.5,
        "backoff_factor": 2.0,
    }
    wiki = entries["stageline.templates.builtin.wiki_build:build"]
    assert (wiki.tier, wiki.capability) == ("agent", "agent")
    honest_entry = entries["catalog_test.honest"]
    assert honest_entry.origin == "installed"  # this test module is no stageline module
    assert honest_entry.retry is not None and honest_entry.retry["max_attempts"] == 3


def test_stages_command_lists_by_capability_as_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STAGELINE_HOME", str(tmp_path / ".stageline"))
    assert run_cli(["stages", "--capability", "review", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    refs = {e["ref"] for e in listed}
    assert {"blog.critic_a", "blog.critic_b", "sdlc.review"} <= refs
    assert all(e["capability"] == "review" for e in listed)
    assert run_cli(["stages"]) == 0
    table = capsys.readouterr().out
    assert "blog.draft" in table and "writing" in table


def test_the_nodes_of_langgraph_json_graphs_are_listed_not_composable(tmp_path: Path) -> None:
    from stageline.config import load_settings
    from stageline.templates import use_project

    root = tmp_path / "project"
    shutil.copytree(Path(__file__).parents[1] / "fixtures" / "langgraph_project", root)
    settings = load_settings(cwd=root, env={"STAGELINE_HOME": str(tmp_path / "home")})
    use_project(settings)
    entries = {e.ref: e for e in build_catalog(settings.root, settings.template_dirs)}
    greet = entries["greeter/greet"]
    assert (greet.origin, greet.tier, greet.composable) == ("langgraph.json", "graph", False)
    assert (greet.reads, greet.writes) == (("name",), ("message",))
    assert entries["inbox/review"].asks_person  # it calls interrupt()
    assert entries["blog.draft"].composable
