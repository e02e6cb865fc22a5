"""The built-in ``blog_post`` template, run directly on LangGraph with a fake journal."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from stageline.errors import InputError
from stageline.llm import Completion, OfflineModel
from stageline.stages import RunContext
from stageline.templates import load_template
from stageline.templates.builtin.blog_post import template

NODES = [
    "research",
    "outline",
    "draft",
    "critic_a",
    "critic_b",
    "aggregate",
    "editor_approval",
    "publish",
]
GATE = "editor_approval"
LLM_NODES = NODES[:5]


class FakeJournal:
    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []

    def node_started(self, *, node: str, **_: Any) -> None:
        self.started.append(node)

    def node_finished(
        self, *, node: str, status: str, metrics: Mapping[str, float], **kw: Any
    ) -> None:
        self.finished.append({"node": node, "status": status, "metrics": dict(metrics), **kw})

    def node_event(self, **kw: Any) -> None:
        self.events.append(kw)


class RecordingModel(OfflineModel):
    """The offline model, remembering every prompt it was given."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def complete(self, prompt: str, *, system: str | None = None) -> Completion:
        self.prompts.append(prompt)
        return await super().complete(prompt, system=system)


def decision(payload: dict[str, Any], kind: str = "approve", note: str = "") -> dict[str, Any]:
    """What the runner resumes a gate with, for the attempt and state the gate showed."""
    return {
        "decision": kind,
        "note": note,
        "attempt": payload["attempt"],
        "state_hash": payload["state_hash"],
        "token": "t",
    }


async def run_blog(
    run_dir: Path,
    inputs: dict[str, Any],
    *,
    model: Any = None,
    run_id: str = "run-1",
    decisions: tuple[tuple[str, str], ...] = (("approve", ""),),
) -> tuple[dict[str, Any], FakeJournal]:
    """Run the template on LangGraph, deciding at the editor's gate each time it stops."""
    journal = FakeJournal()
    graph = template.build().compile(checkpointer=InMemorySaver())
    ctx = RunContext(
        run_id=run_id,
        attempt=1,
        template="blog_post",
        services={},
        journal=journal,
        run_dir=run_dir,
        model=model or OfflineModel(),
    )
    config = {"configurable": {"thread_id": run_id}}
    payload: Any = inputs
    for kind, note in (*decisions, ("stop", "")):
        async for _ in graph.astream(payload, config, context=ctx, durability="sync"):
            pass
        state = await graph.aget_state(config)
        if not state.interrupts or kind == "stop":
            break
        [asked] = state.interrupts
        assert asked.value["gate"] == GATE
        payload = Command(resume={asked.id: decision(asked.value, kind, note)})
    values = dict(state.values)
    return {k: v for k, v in values.items() if not k.startswith("stageline_")}, journal


def test_template_validates_and_has_the_declared_shape() -> None:
    template.validate()
    assert template.name == "blog_post"
    assert template.version == "2"
    assert template.description and "\n" not in template.description
    assert template.nodes == NODES
    draft = template.stage_of("draft")
    assert draft.retry is not None and draft.retry.max_attempts == 2
    assert draft.timeout
    assert template.stage_of("critic_a").writes == ("reviews",)
    assert template.stage_of("critic_b").writes == ("reviews",)
    assert all(template.stage_of(n).name == f"blog.{n}" for n in NODES if n != GATE)
    assert template.stage_of(GATE).name == f"gate:{GATE}"
    gate = template.gates[GATE]
    assert (gate.changes_to, gate.reject_to, gate.on_deadline[-1]) == ("draft", None, "park")
    [loop] = template.loops
    assert (loop.head, loop.max_iterations) == ("draft", 4)


def test_registry_finds_the_builtin() -> None:
    assert load_template("blog_post") is template


async def test_a_run_publishes_markdown(tmp_path: Path) -> None:
    state, journal = await run_blog(tmp_path / "run", {"topic": "durable agent pipelines"})

    # The gate ran twice: it stopped for the editor, and LangGraph replayed it on resume.
    assert Counter(journal.started) == Counter({**Counter(NODES), GATE: 2})
    succeeded = [f["node"] for f in journal.finished if f["status"] == "succeeded"]
    assert sorted(succeeded) == sorted(NODES)
    assert [f["node"] for f in journal.finished if f["status"] == "waiting"] == [GATE]

    assert state["audience"] == "engineers"
    assert len(state["reviews"]) == 2
    assert {r["critic"] for r in state["reviews"]} == {"critic_a", "critic_b"}
    for review in state["reviews"]:
        assert 0.0 <= review["score"] <= 1.0 and review["notes"]
    mean = sum(r["score"] for r in state["reviews"]) / 2
    assert state["score"] == pytest.approx(mean, abs=1e-3)
    assert "2 reviews" in state["summary"]

    post = Path(state["post_path"])
    assert post == tmp_path / "run" / "post.md"
    text = post.read_text(encoding="utf-8")
    assert text.startswith("# Durable agent pipelines\n")
    assert "## Reviewers' notes" in text
    assert "- **critic_a**" in text and "- **critic_b**" in text
    assert state["draft"].strip() in text
    assert "offline model" in text

    metrics = {f["node"]: f["metrics"] for f in journal.finished}
    for node in LLM_NODES:
        assert metrics[node]["input_tokens"] > 0
        assert metrics[node]["output_tokens"] > 0
        assert "llm_latency" in metrics[node]
    assert "input_tokens" not in metrics["publish"]


async def test_the_editor_stops_the_run_and_changes_go_back_to_draft(tmp_path: Path) -> None:
    model = RecordingModel()
    state, journal = await run_blog(
        tmp_path,
        {"topic": "gates"},
        model=model,
        decisions=(("changes", "Make it shorter."),),
    )
    assert "post_path" not in state  # waiting at the gate again, after the second draft
    assert state["feedback"] == "Make it shorter."
    drafts = [p for p in model.prompts if p.startswith("Write the blog post")]
    assert len(drafts) == 2 and "Make it shorter." in drafts[1] and "feedback" not in drafts[0]
    logged = [e for e in journal.events if e["kind"] == "stage.log" and e["node"] == "draft"]
    assert logged and logged[-1]["data"]["feedback"] == "Make it shorter."
    assert len(state["reviews"]) == 4  # a fresh round of reviews for the new draft

    rejected, _ = await run_blog(
        tmp_path / "r", {"topic": "gates"}, run_id="r", decisions=(("reject", "no"),)
    )
    assert "post_path" not in rejected and not (tmp_path / "r" / "post.md").exists()


async def test_same_topic_gives_the_same_post(tmp_path: Path) -> None:
    inputs = {"topic": "checkpoints", "audience": "operators"}
    first, _ = await run_blog(tmp_path / "a", inputs, run_id="a")
    second, _ = await run_blog(tmp_path / "b", inputs, run_id="b")
    assert Path(first["post_path"]).read_text() == Path(second["post_path"]).read_text()
    assert first["score"] == second["score"]
    assert "*For operators." in Path(first["post_path"]).read_text()


async def test_feedback_reaches_the_draft_prompt(tmp_path: Path) -> None:
    model = RecordingModel()
    note = "Cut the second section and add a failure story."
    await run_blog(tmp_path, {"topic": "gates", "feedback": note}, model=model)
    drafts = [p for p in model.prompts if p.startswith("Write the blog post")]
    assert len(drafts) == 1 and note in drafts[0]

    plain = RecordingModel()
    await run_blog(tmp_path / "plain", {"topic": "gates"}, model=plain, run_id="plain")
    assert not any("Editor's feedback" in p for p in plain.prompts)


async def test_missing_topic_fails_research(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="topic"):
        await run_blog(tmp_path, {"topic": "  "})
