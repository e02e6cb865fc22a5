"""A long-lived runner (a worker, the server) keeps one compiled graph per template version,
however many runs it advances, and never more than its bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from stageline.config import Settings
from stageline.runner import Runner
from stageline.runner._runner import GRAPH_CACHE_SIZE
from stageline.templates import _registry
from stageline.testing import memory_runner

STAGES = """
async def bump(state, ctx):
    return {"n": state.get("n", 0) + 1}
"""


def _yaml(name: str) -> str:
    return (
        f"name: {name}\nstate:\n  n: int\nstages:\n  one: cache_test_stages:bump\n"
        "  two: cache_test_stages:bump\nedges:\n  - [one, two]\n"
    )


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "cache_test_stages.py").write_text(STAGES)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _cached(runner: Runner) -> int:
    return len(runner.graphs)


async def test_a_yaml_template_given_by_path_is_compiled_once_for_many_runs(
    memory_settings: Settings, project: Path
) -> None:
    path = project / "counting.yaml"
    path.write_text(_yaml("counting"))
    async with memory_runner(memory_settings) as runner:
        for _ in range(150):
            done = await runner.start(str(path), {"n": 0})
            assert done.status == "succeeded"
        assert _cached(runner) == 1

        path.write_text(
            _yaml("counting")
            .replace("two]", "two]\n  - [two, three]")
            .replace("edges:", "  three: cache_test_stages:bump\nedges:")
        )  # a new version
        await runner.start(str(path), {"n": 0})
        assert _cached(runner) == 2


async def test_the_graph_cache_is_bounded(memory_settings: Settings, project: Path) -> None:
    async with memory_runner(memory_settings) as runner:
        compiled = []
        for number in range(GRAPH_CACHE_SIZE + 10):
            path = project / f"t{number}.yaml"
            path.write_text(_yaml(f"t{number}"))
            await runner.start(str(path), {"n": 0})
            compiled.append(runner.graph(str(path)))
        assert _cached(runner) == GRAPH_CACHE_SIZE
        last = project / f"t{GRAPH_CACHE_SIZE + 9}.yaml"
        assert runner.graph(str(last)) is compiled[-1]  # the newest are kept
        assert runner.graph(str(project / "t0.yaml")) is not compiled[0]  # the oldest went
    assert len(_registry._YAML_CACHE) <= _registry.YAML_CACHE_SIZE


async def test_a_cached_graph_is_never_one_of_another_template_object(
    memory_settings: Settings, project: Path
) -> None:
    """Two objects with one name and version (closures over other values) each run their own."""
    from typing import Any, TypedDict

    from stageline.templates import Template

    class S(TypedDict, total=False):
        n: int

    def make(value: int) -> Template:
        async def put(state: S, ctx: Any) -> dict[str, Any]:
            return {"n": value}

        made = Template("same", state=S)
        made.add_stage("put", put)
        return made

    async with memory_runner(memory_settings) as runner:
        first, second = make(1), make(2)
        assert first.full_version == second.full_version
        assert (await runner.start(first, {})).state["n"] == 1
        assert (await runner.start(second, {})).state["n"] == 2
        assert _cached(runner) == 1
