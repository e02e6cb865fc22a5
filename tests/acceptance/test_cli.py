"""The ``stageline`` command as a user runs it: a real subprocess in a fresh folder."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

BLOG_NODES = [
    "research",
    "outline",
    "draft",
    "critic_a",
    "critic_b",
    "aggregate",
    "editor_approval",
    "publish",
]

Cli = Callable[..., subprocess.CompletedProcess[str]]
"""The ``cli`` fixture (tests/acceptance/conftest.py): ``stageline ARGS`` as a subprocess."""


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return done


def _waiting(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    return done


def _start_blog(cli: Cli) -> str:
    """A blog_post run, approved at the editor's gate, finished."""
    _waiting(cli("run", "blog_post", "-i", "topic=durable pipelines", "--run-id", "blog1"))
    _ok(cli("approve", "blog1", "--note", "fine", "--as", "ed"))
    return "blog1"


def _error_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2, done.stderr
    assert lines[0].startswith("error: "), done.stderr
    return done.stderr


def test_run_blog_post_shows_progress_and_writes_the_post(cli: Cli, tmp_path: Path) -> None:
    out = _waiting(cli("run", "blog_post", "-i", "topic=durable pipelines")).stdout
    for node in BLOG_NODES[:-2]:
        assert f"▶ {node}" in out, out
        assert f"✔ {node} " in out, out
    assert out.index("▶ research") < out.index("✔ research") < out.index("▶ outline")
    assert "⏸ editor_approval is waiting for a person" in out
    result = [line for line in out.splitlines() if "waiting" in line and "run " in line]
    assert result, out
    run_id = result[-1].split("run ", 1)[1].split()[0]
    assert f"stageline approve {run_id}" in out
    out = _ok(cli("approve", run_id)).stdout
    for node in BLOG_NODES[-2:]:
        assert f"✔ {node} " in out, out
    assert "succeeded" in out
    posts = list((tmp_path / "home" / "runs").glob("*/post.md"))
    assert [p.parent.name for p in posts] == [run_id]
    assert "Durable pipelines" in posts[0].read_text()
    assert f"post_path: {posts[0]}" in out
    assert f"stageline show {run_id}" in out


def test_read_commands_print_json_only(cli: Cli) -> None:
    run_id = _start_blog(cli)

    shown = json.loads(_ok(cli("show", run_id, "--json")).stdout)
    assert shown["run"]["run_id"] == run_id
    assert shown["run"]["status"] == "succeeded"
    assert [r["node"] for r in shown["records"]] == BLOG_NODES
    [decided] = shown["decisions"]
    assert (decided["decision"], decided["actor"], decided["status"]) == (
        "approve",
        "ed",
        "applied",
    )
    assert all(isinstance(r["duration"], float) and r["duration"] >= 0 for r in shown["records"])
    assert shown["state"]["post_path"].endswith("post.md")

    runs = json.loads(_ok(cli("runs", "--json")).stdout)
    assert [(r["run_id"], r["status"], r["template"]) for r in runs] == [
        (run_id, "succeeded", "blog_post")
    ]
    assert json.loads(_ok(cli("runs", "--status", "failed", "--json")).stdout) == []
    assert json.loads(_ok(cli("runs", "--template", "nope", "--json")).stdout) == []

    events = json.loads(_ok(cli("logs", run_id, "--json")).stdout)
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "run.started" and kinds[-1] == "run.succeeded"
    assert kinds.count("node.succeeded") == len(BLOG_NODES)
    logged = json.loads(_ok(cli("logs", run_id, "--json", "--kind", "log")).stdout)
    assert logged and {e["category"] for e in logged} == {"log"}


def test_human_show_runs_and_logs(cli: Cli) -> None:
    run_id = _start_blog(cli)
    shown = _ok(cli("show", run_id)).stdout
    for word in ("blog_post", "succeeded", "attempt", *BLOG_NODES, "input_tokens="):
        assert word in shown, shown
    assert run_id in _ok(cli("runs")).stdout
    logs = _ok(cli("logs", run_id)).stdout
    assert "node.started research" in logs and "run.succeeded" in logs


def test_templates_lists_builtins_and_the_templates_folder(
    cli: Cli, tmp_path: Path, flaky_template: str
) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "flaky.py").write_text(flaky_template)
    infos = json.loads(_ok(cli("templates", "--json")).stdout)
    by_name = {i["name"]: i for i in infos}
    assert by_name["blog_post"]["origin"] == "builtin"
    assert by_name["flaky"]["origin"] == "templates folder"
    assert by_name["flaky"]["source"].endswith("flaky.py")
    assert "blog_post" in _ok(cli("templates")).stdout


def test_graph_prints_mermaid(cli: Cli) -> None:
    out = _ok(cli("graph", "blog_post")).stdout
    assert "graph TD" in out
    assert "draft --> critic_a" in out and "publish --> __end__" in out


def test_unknown_template_is_a_usage_error_listing_the_known_ones(cli: Cli) -> None:
    err = _error_line(cli("run", "no_such_template", "-i", "topic=x"), 2)
    assert "no_such_template" in err and "blog_post" in err
    assert "blog_post" in _error_line(cli("graph", "no_such_template"), 2)


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["-i", "topic"], "-i 'topic'"),
        (["-i", "=x"], "-i '=x'"),
        (["-i", "topic:={not json"], "-i 'topic:={not json'"),
        (["-i", "no_such_key=1"], "no_such_key"),
        (["--input-file", "missing.json"], "--input-file missing.json"),
        (["--input-file", "bad.yaml"], "--input-file bad.yaml"),
        (["--input-file", "list.json"], "--input-file list.json"),
    ],
)
def test_malformed_inputs_exit_2_naming_the_argument(
    cli: Cli, tmp_path: Path, args: list[str], names: str
) -> None:
    (tmp_path / "bad.yaml").write_text("topic: [unclosed\n")
    (tmp_path / "list.json").write_text("[1, 2]")
    done = cli("run", "blog_post", *args)
    assert names in _error_line(done, 2)
    assert not (tmp_path / "home" / "runs").exists()


def test_inputs_from_a_file_and_json_values(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "inputs.yaml").write_text("topic: from the file\naudience: nobody\n")
    _waiting(
        cli(
            "run",
            "blog_post",
            "--input-file",
            "inputs.yaml",
            "-i",
            'audience:="managers"',
            "--run-id",
            "in1",
        )
    )
    shown = json.loads(_ok(cli("show", "in1", "--json")).stdout)
    assert shown["run"]["inputs"] == {"topic": "from the file", "audience": "managers"}


def test_bad_usage_exits_2_without_traceback(cli: Cli) -> None:
    assert cli("run").returncode == 2
    assert cli("runs", "--status", "bogus").returncode == 2
    assert cli("no-such-command").returncode == 2


def test_unknown_run_id_exits_2(cli: Cli) -> None:
    for command in ("show", "logs", "resume", "retry", "cancel"):
        err = _error_line(cli(command, "nope"), 2)
        assert "'nope'" in err, (command, err)


def test_cancel_or_resume_of_a_finished_run_is_a_conflict(cli: Cli) -> None:
    run_id = _start_blog(cli)
    assert "succeeded" in _error_line(cli("cancel", run_id), 4)
    _error_line(cli("resume", run_id), 4)
    _error_line(cli("retry", run_id), 4)


def test_failed_run_exits_1_and_retry_finishes_it(
    cli: Cli, tmp_path: Path, flaky_template: str
) -> None:
    (tmp_path / "flaky.py").write_text(flaky_template)
    failed = cli("run", "flaky.py", "--run-id", "f1")
    assert failed.returncode == 1, (failed.stdout, failed.stderr)
    assert (
        "✔ first" in failed.stdout and "✖ second: RuntimeError: ok.flag is missing" in failed.stdout
    )
    assert "stageline retry f1" in failed.stdout
    shown = json.loads(_ok(cli("show", "f1", "--json")).stdout)["run"]
    assert (shown["status"], shown["failed_node"], shown["failure_phase"]) == (
        "failed",
        "second",
        "stage",
    )
    _error_line(cli("resume", "f1"), 4)

    (tmp_path / "ok.flag").touch()
    retried = _ok(cli("retry", "f1"))
    assert "▶ first" not in retried.stdout and "✔ second" in retried.stdout
    assert json.loads(_ok(cli("show", "f1", "--json")).stdout)["run"]["attempt"] == 2


def test_detach_queues_the_run_and_logs_follow_it_to_the_end(
    cli: Cli, tmp_path: Path, flaky_template: str
) -> None:
    (tmp_path / "ok.flag").touch()
    (tmp_path / "flaky.py").write_text(flaky_template)
    done = _ok(cli("run", "flaky.py", "-i", "topic=background", "--detach", "--run-id", "bg1"))
    assert "bg1" in done.stdout and "stageline logs bg1 --follow" in done.stdout
    followed = _ok(cli("logs", "bg1", "--follow", "--json", timeout=60))
    events = [json.loads(line) for line in followed.stdout.splitlines()]
    assert events[0]["kind"] == "run.queued" and events[-1]["kind"] == "run.succeeded", (
        tmp_path / "home" / "runs" / "bg1" / "worker.log"
    ).read_text()
    assert json.loads(_ok(cli("show", "bg1", "--json")).stdout)["run"]["status"] == "succeeded"
    # The project's local worker advanced it and says so in the run's worker log.
    assert "second succeeded" in (tmp_path / "home" / "runs" / "bg1" / "worker.log").read_text()


@pytest.mark.timeout(240)  # a hang guard: nothing here is timed
def test_detached_blog_post_finishes(cli: Cli, tmp_path: Path) -> None:
    _ok(cli("run", "blog_post", "-i", "topic=background", "--detach", "--run-id", "bg2"))
    worker_log = tmp_path / "home" / "runs" / "bg2" / "worker.log"
    status = "queued"
    while status in ("queued", "running"):
        seen = worker_log.read_text() if worker_log.exists() else ""
        assert "error:" not in seen, seen
        status = json.loads(_ok(cli("show", "bg2", "--json")).stdout)["run"]["status"]
    assert status == "waiting"  # at the editor's gate
    _ok(cli("approve", "bg2"))
    assert (tmp_path / "home" / "runs" / "bg2" / "post.md").is_file()


def test_yaml_template_with_an_unknown_stage_names_file_and_line(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text(
        "name: broken\nstate:\n  topic: str\nstages:\n  a: no_such_stage\n"
    )
    err = _error_line(cli("run", "broken.yaml", "-i", "topic=x"), 2)
    assert "broken.yaml:5:" in err and "no_such_stage" in err


def test_storage_and_config_errors_have_their_exit_codes(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "stageline.toml").write_text('database_url = "bogus://x"\n')
    assert "bogus://" in _error_line(cli("runs"), 2)
    (tmp_path / "stageline.toml").write_text("")
    (tmp_path / "home").write_text("a file where the home folder should be")
    _error_line(cli("runs"), 6)


def test_help_documents_the_exit_codes(cli: Cli) -> None:
    out = _ok(cli("--help")).stdout
    assert "Exit codes:" in out
    for code in ("0", "1", "2", "3", "4", "6"):
        assert f"\n    {code} " in out, out
