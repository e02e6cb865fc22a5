"""The README's examples run as written: every fenced python, bash, yaml,
toml and json block.

Each block runs in a fresh project folder, as a reader would run it there:

- ``python``: a script in the project's root (``python block.py``). A block whose first line
  is ``# path/to/file.py`` is a file of the reader's project (``mypkg/stages.py``): it is
  written into every project, so later blocks and YAML templates can import it, and it runs
  as a script too.
- ``bash``: the block as a ``bash -e`` script (``stageline`` is this checkout's CLI).
- ``yaml``: a template, loaded and checked by ``stageline graph FILE``.
- ``toml``: a ``stageline.toml``, checked by a command that loads it (``stageline runs``).
- ``json``: a ``langgraph.json``, parsed; each graph names ``./file.py:attribute``.
- ``text``: terminal sessions and sketches, never run.

An HTML comment on the line before a fence marks a block that cannot run as it stands:

- ``<!-- readme-test: needs-server -->``: the test starts ``stageline serve`` in the project,
  points ``http://127.0.0.1:8484`` at it and passes a ``decide`` token as ``TOKEN``.
- ``<!-- readme-test: skip (reason) -->``: not run; every such block is listed in ``SKIPPED``
  below, so a new one is a visible change here too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from server_fixtures import make_project

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
RUNS = ("python", "bash", "yaml", "toml", "json")
NEVER_RUN = ("text",)
SERVER_URL = "http://127.0.0.1:8484"
TIMEOUT = 600

SKIPPED = {
    "# 1. Install and run the main job: the built-in blog_post pipeline, offline, on SQLite",
    "stageline approve RUN            # publish: the post lands in .stageline/runs/RUN/post.md",
    "python -m pip install -e '.[dev]' -c constraints/dev.txt && python -m pytest",
    "python -m venv /tmp/fresh && /tmp/fresh/bin/python -m pip install -e '.[dev]'",
    "STAGELINE_CHAOS_RUNS=200 python -m pytest tests/acceptance/test_worker_chaos.py",
    "STAGELINE_VISIT_RACE_TRIALS=50 python -m pytest tests/acceptance/test_decision_races.py",
    "python scripts/mutation.py                  # every configured module, then a table of scores",
    "python benchmarks/bench_runner.py",
    "python benchmarks/bench_cli.py",
    "export STAGELINE_DATABASE_URL=postgresql://user:pass@db.internal:5432/stageline",
    "stageline worker --concurrency 4",
    "stageline serve --workers 2      # or [server] workers = 2, or STAGELINE_SERVER_WORKERS=2",
    "TOKEN=$(stageline token create me --scope admin | tail -n 1)",
}
"""The first line of each block marked ``skip``."""

_FENCE = re.compile(r"^```(\S*)\s*$")
_MARKER = re.compile(r"^<!--\s*readme-test:\s*(.*?)\s*-->$")


@dataclass(frozen=True)
class Block:
    """One fenced block of the README."""

    line: int
    lang: str
    text: str
    marker: str

    @property
    def first(self) -> str:
        return self.text.splitlines()[0] if self.text else ""

    @property
    def path(self) -> str | None:
        """Where a python block that is a file of the project goes (``# mypkg/stages.py``)."""
        found = re.fullmatch(r"#\s*([\w/]+\.py)", self.first.strip())
        return found.group(1) if self.lang == "python" and found else None

    @property
    def skipped(self) -> bool:
        return self.marker.startswith("skip")


def read_blocks(text: str) -> list[Block]:
    """The fenced blocks of ``text``, each with the marker on the line before it."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if opened is None:
            i += 1
            continue
        before = _MARKER.match(lines[i - 1].strip()) if i else None
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        body = "\n".join(lines[i + 1 : end]) + "\n"
        blocks.append(Block(i + 1, opened.group(1), body, before.group(1) if before else ""))
        i = end + 1
    return blocks


BLOCKS = read_blocks(README.read_text(encoding="utf-8"))
FILES = [b for b in BLOCKS if b.path]
RUNNABLE = [b for b in BLOCKS if b.lang in RUNS and not b.skipped]


def test_every_block_is_run_or_marked() -> None:
    """A block in another language, an unknown marker or an unlisted skip fails here."""
    assert len(RUNNABLE) >= 10
    assert [b.line for b in BLOCKS if b.lang not in RUNS + NEVER_RUN] == []
    for block in BLOCKS:
        assert block.marker in ("", "needs-server") or re.fullmatch(r"skip \(.+\)", block.marker), (
            block.line,
            block.marker,
        )
    assert {b.first for b in BLOCKS if b.skipped} == SKIPPED
    assert not [b.line for b in BLOCKS if b.marker and b.lang not in RUNS]


def test_a_broken_block_is_found() -> None:
    """The reader finds a block's marker and text exactly, so a changed example is run."""
    found = read_blocks(
        "x\n<!-- readme-test: skip (why) -->\n```bash\nfalse\n```\n```python\n# a/b.py\n```\n"
    )
    assert [(b.line, b.lang, b.text, b.marker) for b in found] == [
        (3, "bash", "false\n", "skip (why)"),
        (6, "python", "# a/b.py\n", ""),
    ]
    assert found[1].path == "a/b.py"


def _env(project: Path, **extra: str) -> dict[str, str]:
    """A reader's environment: no stageline settings, this checkout's code first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGELINE_")}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(extra)
    return env


def _project(root: Path) -> Path:
    """A project folder holding the README's files (``# mypkg/stages.py`` blocks)."""
    root.mkdir(parents=True, exist_ok=True)
    for block in FILES:
        assert block.path is not None
        target = root / block.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text, encoding="utf-8")
    return root


def _run(argv: list[str], cwd: Path, env: dict[str, str], block: Block) -> str:
    done = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, (
        f"README.md:{block.line} ({block.lang}) exited {done.returncode}:\n"
        f"{block.text}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def _stageline(*args: str) -> list[str]:
    return [sys.executable, "-m", "stageline.cli", *args]


def _python(block: Block, project: Path, env: dict[str, str]) -> None:
    script = project / (block.path or f"readme_{block.line}.py")
    if block.path is None:
        script.write_text(block.text, encoding="utf-8")
    _run([sys.executable, str(script)], project, env, block)


def _with_server(block: Block, tmp_path: Path) -> None:
    server = make_project(_project(tmp_path / "served"))
    server.start()
    try:
        text = block.text.replace(SERVER_URL, server.url)
        script = server.project / f"readme_{block.line}.{'py' if block.lang == 'python' else 'sh'}"
        script.write_text(text, encoding="utf-8")
        env = {**server.env, "TOKEN": server.tokens["decide"]}
        argv = [sys.executable] if block.lang == "python" else ["bash", "-e"]
        _run([*argv, str(script)], server.project, env, block)
    finally:
        server.stop()


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: f"line{b.line}-{b.lang}")
def test_the_readme_block_runs(block: Block, tmp_path: Path) -> None:
    if block.marker == "needs-server":
        _with_server(block, tmp_path)
        return
    project = _project(tmp_path / "project")
    env = _env(project)
    if block.lang == "python":
        _python(block, project, env)
    elif block.lang == "bash":
        script = project / f"readme_{block.line}.sh"
        script.write_text(block.text, encoding="utf-8")
        _run(["bash", "-e", str(script)], project, env, block)
    elif block.lang == "yaml":
        (project / "templates").mkdir()
        template = project / "templates" / f"readme_{block.line}.yaml"
        template.write_text(block.text, encoding="utf-8")
        assert "flowchart" in _run(_stageline("graph", str(template)), project, env, block)
    elif block.lang == "json":  # a langgraph.json: graph names -> "./file.py:attribute"
        graphs = json.loads(block.text)["graphs"]
        assert graphs and all(re.fullmatch(r"\./\S+\.py:\w+", ref) for ref in graphs.values())
    else:
        (project / "stageline.toml").write_text(block.text, encoding="utf-8")
        assert _run(_stageline("runs", "--json"), project, env, block).strip() == "[]"
