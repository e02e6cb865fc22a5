"""The ``stageline`` command under attack, as real subprocesses: run ids that are paths, inputs
JSON cannot hold (SQLite and Postgres), YAML bombs, a broken stageline.toml, and a script input
that tries to start a process. Each is refused with exit 2 (or fails the run) and leaves
nothing behind: no file outside the project, no run row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

Cli = Callable[..., subprocess.CompletedProcess[str]]

BOMB = textwrap.dedent("""
    name: bomb
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
    stages: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
    """).lstrip()


def make_cli(project: Path, **extra: str) -> Cli:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGELINE_")}
    env.update(STAGELINE_MODEL="offline", PYTHONIOENCODING="utf-8", COLUMNS="200", **extra)

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "stageline.cli", *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=120,
            check=False,
            input=stdin,
        )
        assert "Traceback" not in done.stderr, done.stderr
        return done

    return run


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "a" / "b" / "project"  # three levels deep: ../../../escape is tmp_path
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def cli(project: Path) -> Cli:
    return make_cli(project)


def refused(done: subprocess.CompletedProcess[str], *says: str) -> None:
    """Exit 2 with one error line that says all of ``says``."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for part in says:
        assert part in lines[0], lines[0]


def no_runs(cli: Cli) -> None:
    listed = cli("runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


# -- 1. run ids are names, never paths ----------------------------------------------------------


def test_run_ids_that_are_paths_are_refused_and_nothing_lands_outside(
    cli: Cli, project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "some" / "dir"
    before = files_under(tmp_path)
    attacks = [
        ("../../../escape", []),
        (str(outside), []),
        ("", []),
        ("r" * 65, []),
        ("../../../escape", ["--detach"]),
        (str(outside), ["--detach"]),
    ]
    for run_id, flags in attacks:
        refused(
            cli("run", "blog_post", "-i", "topic=a", "--run-id", run_id, *flags),
            f"--run-id {run_id!r:.60}",  # a long one is shown cut (tmp paths vary in length)
            "is not a valid run id",
            "1-64 letters",
        )
    no_runs(cli)
    assert not (tmp_path / "escape").exists() and not outside.exists()
    made = files_under(tmp_path) - before
    assert all(p.startswith("a/b/project/.stageline") for p in made), made
    assert not [p for p in made if p.endswith(("post.md", "worker.log"))]


def test_every_command_taking_a_run_refuses_a_path(cli: Cli, tmp_path: Path) -> None:
    commands = [
        ["show", "../../../escape"],
        ["logs", "/etc"],
        ["resume", ".."],
        ["cancel", "../../../escape"],
        ["approve", "../../../escape"],
        ["changes", "/tmp/x", "--note", "x"],
        ["answer", "../x", "-a", "q=1"],
        ["transcript", "../../../escape"],
        ["pending", "/etc"],
        ["effect", "../x", "node", "key", "--done"],
    ]
    for command in commands:
        refused(cli(*command), f"RUN {command[1]!r} is not a valid run id")
    assert not (tmp_path / "escape").exists()


def test_a_good_run_id_still_works_and_writes_under_its_run_folder(cli: Cli, project: Path) -> None:
    done = cli("run", "blog_post", "-i", "topic=a", "--run-id", "Blog-1.a_b")
    assert done.returncode == 3, done.stderr  # waits at the editor's gate
    done = cli("approve", "Blog-1.a_b")
    assert done.returncode == 0, done.stderr
    assert (project / ".stageline" / "runs" / "Blog-1.a_b" / "post.md").is_file()


# -- 5. inputs that cannot be plain JSON, on SQLite and Postgres --------------------------------


HOSTILE_ASSIGNMENTS = [
    "topic:=NaN",
    "topic:=1e999",
    'topic:={"k": "v\\u0000"}',
    'topic:=["\\ud800"]',
]
HOSTILE_FILES = {
    "set.yaml": "topic: !!set {a, b}\n",
    "date.yaml": "n: 1\ntopic: 2024-01-01\n",
    "binary.yaml": "topic: !!binary aGVsbG8=\n",
    "nul.json": '{"topic": "a\\u0000"}',
}


def _hostile_inputs_are_refused(cli: Cli, project: Path) -> None:
    for raw in HOSTILE_ASSIGNMENTS:
        refused(cli("run", "blog_post", "-i", raw), "input 'topic' cannot be stored")
    refused(cli("run", "blog_post", "-i", "topic:=NaN", "--detach"), "input 'topic'")
    for name, text in HOSTILE_FILES.items():
        (project / name).write_text(text)
        refused(
            cli("run", "blog_post", "--input-file", name),
            f"--input-file {name}",
            "['topic']" if name.endswith(".yaml") else "'topic'",
        )
    no_runs(cli)


def test_inputs_json_cannot_hold_are_refused_on_sqlite(cli: Cli, project: Path) -> None:
    _hostile_inputs_are_refused(cli, project)


def test_inputs_json_cannot_hold_are_refused_on_postgres(project: Path, postgres_url: str) -> None:
    cli = make_cli(project, STAGELINE_DATABASE_URL=postgres_url)
    _hostile_inputs_are_refused(cli, project)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM stageline_runs").fetchone()
    assert row == (0,)


# -- 7. YAML cannot exhaust memory ---------------------------------------------------------------


def test_a_billion_laughs_fails_fast_naming_file_and_line(cli: Cli, project: Path) -> None:
    (project / "bomb.yaml").write_text(BOMB)
    for args in (["graph", "bomb.yaml"], ["run", "bomb.yaml"]):
        done = cli(*args)
        refused(done, "bomb.yaml:7:", "aliases expand to more than")
        assert len(done.stderr) < 400
    (project / "in.yaml").write_text(BOMB.replace("stages:", "topic:"))
    refused(
        cli("run", "blog_post", "--input-file", "in.yaml"),
        "--input-file in.yaml",
        "line 7",
        "aliases expand to more than",
    )
    no_runs(cli)


# -- 6. stageline.toml is validated --------------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "says"),
    [
        ("lease_ttl = [1]\n", "stageline.toml:1: lease_ttl: input should be a valid number"),
        ("home = 5\n", "stageline.toml:1: home: input should be a valid string"),
        ("database_url = 5\n", "stageline.toml:1: database_url: input should be a valid string"),
        ("model = 5\n", "stageline.toml:1: model:"),
        (
            '# project\ndatabse_url = "sqlite:///x.db"\n',
            "stageline.toml:2: databse_url: unknown key (did you mean 'database_url'?)",
        ),
        ("lease_ttl = -1\n", "stageline.toml:1: lease_ttl: input should be greater than 0"),
        ("lease_ttl = \n", "stageline.toml"),
    ],
)
def test_a_broken_config_is_exit_2_naming_file_line_and_key(
    cli: Cli, project: Path, toml: str, says: str
) -> None:
    (project / "stageline.toml").write_text(toml)
    refused(cli("run", "blog_post", "-i", "topic=a"), says)
    assert not (project / ".stageline").exists()


def test_a_broken_environment_value_is_exit_2(project: Path) -> None:
    cli = make_cli(project, STAGELINE_LEASE_TTL="soon")
    refused(cli("runs"), "environment variable STAGELINE_LEASE_TTL")


# -- 11. inputs cannot start processes -----------------------------------------------------------


def test_a_script_input_cannot_spawn_a_process(project: Path, tmp_path: Path) -> None:
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(project)]
    (project / "README.md").write_text("# Sample\n\nA sample.\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    marker = tmp_path / "pwned"
    script = [{"spawn": ["touch", str(marker)]}, {"sleep": 0.5}]
    (project / "script.json").write_text(json.dumps({"script": script}))
    cli = make_cli(project)
    done = cli(
        "run",
        "wiki_ingest",
        "-i",
        "source=README.md",
        "-i",
        "wiki=wiki",
        "--input-file",
        "script.json",
        "--run-id",
        "s1",
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    run = json.loads(cli("show", "s1", "--json").stdout)["run"]
    assert run["failure_phase"] == "harness_readiness"
    assert "would start a process" in run["error"]
    assert not marker.exists()
