"""The wiki templates through ``stageline`` as a user runs it, offline, in a temp git repo."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

Cli = Callable[..., subprocess.CompletedProcess[str]]

README = """# Sample service

The sample service answers questions about [its data](docs/data.md) quickly.

## Install

Run the installer.

## Operate

Watch the dashboard.
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with a README; stageline's home is inside it, not git-ignored."""
    (tmp_path / "README.md").write_text(README)
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    return tmp_path


@pytest.fixture
def cli_env(cli_env: dict[str, str], repo: Path) -> dict[str, str]:
    """The shared ``cli`` (run in ``tmp_path``, which is ``repo``), its home in the repository."""
    return {**cli_env, "STAGELINE_HOME": str(repo / ".stageline")}


def test_ingest_readme_offline_writes_pages_and_index_and_validates(cli: Cli, repo: Path) -> None:
    done = cli(
        "run",
        "wiki_ingest",
        "-i",
        "source=README.md",
        "-i",
        "wiki=wiki",
        "--apply",
        "--run-id",
        "w1",
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    page = (repo / "wiki" / "readme.md").read_text()
    assert page.startswith('---\ntitle: "Sample service"\nsource: "README.md"\n')
    assert "answers questions about its data quickly" in page
    index = (repo / "wiki" / "index.md").read_text()
    assert "- [Sample service](readme.md)" in index
    shown = json.loads(cli("show", "w1", "--json").stdout)
    assert shown["run"]["status"] == "succeeded"
    assert shown["state"]["pages"] == ["index.md", "readme.md"]
    assert shown["state"]["summary"] == "ingested 1 source file(s) into wiki"
    tools = cli("logs", "w1", "--kind", "tool").stdout
    assert "harness.tool_use" in tools and "harness.message" not in tools
    output = cli("logs", "w1", "--kind", "output").stdout
    assert "harness.file_change" in output and "operation.transcript" in output
    transcript = cli("transcript", "w1", "ingest")
    assert transcript.returncode == 0, transcript.stderr
    assert "file_change" in transcript.stdout
    assert "succeeded: ingested 1 source" in transcript.stdout
    rows = [json.loads(line) for line in cli("transcript", "w1", "--json").stdout.splitlines()]
    assert rows[0]["type"] == "operation.begin" and rows[-1]["type"] == "harness.result"


def test_a_broken_link_fails_the_run_in_validation(cli: Cli, repo: Path) -> None:
    script = [{"write": "wiki/a.md", "content": "---\ntitle: A\n---\nSee [missing](missing.md).\n"}]
    (repo / "script.json").write_text(json.dumps({"script": script}))
    done = cli(
        "run",
        "wiki_ingest",
        "-i",
        "source=README.md",
        "-i",
        "wiki=wiki",
        "--apply",
        "--input-file",
        "script.json",
        "--run-id",
        "w2",
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "(validation)" in done.stdout
    assert "wiki/a.md: broken link 'missing.md'" in done.stdout
    show = cli("show", "w2").stdout
    assert "phase        validation" in show
    assert "wiki/a.md: broken link 'missing.md'" in show
    run = json.loads(cli("show", "w2", "--json").stdout)["run"]
    assert (run["failure_phase"], run["failed_node"]) == ("validation", "ingest")
    assert run["error"] == "OperationFailed: wiki/a.md: broken link 'missing.md'"
    errors = json.loads(cli("logs", "w2", "--kind", "error", "--json").stdout)
    assert [e["kind"] for e in errors] == ["operation.failed", "node.failed", "run.failed"]


def test_transcript_names_the_nodes_it_has(cli: Cli) -> None:
    assert (
        cli(
            "run",
            "wiki_ingest",
            "-i",
            "source=README.md",
            "-i",
            "wiki=wiki",
            "--apply",
            "--run-id",
            "w3",
        ).returncode
        == 0
    )
    done = cli("transcript", "w3", "publish")
    assert done.returncode == 2
    assert "run w3 has no transcript for node 'publish'; it has: ingest" in done.stderr
    assert cli("transcript", "nope").returncode == 2
