"""The command line starts without LangGraph: facts about imports, not timings.

Speed is measured in ``benchmarks/bench_cli.py``; here a fresh process says which modules it
imported, so the claim cannot drift while nobody looks at the clock.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from stageline.cli._app import app
from stageline.cli._codes import EXIT_USAGE
from stageline.cli._main import _cut_to_command, run_cli
from stageline.config import load_settings
from stageline.runner import Runner

HEAVY = (
    "langgraph",
    "langchain",
    "langchain_core",
    "procrastinate",
    "httpx",
    "fastapi",
    "uvicorn",
    "slack_sdk",
)
"""Never imported by ``--help`` or a read command."""
AT_START = (
    *HEAVY,
    "sqlalchemy",
    "yaml",
    "pydantic",
    "pydantic_settings",
    "rich",
    "click",
    "asyncio",
)
"""Never imported by ``import stageline.cli`` (so never by ``--help`` either)."""
FOR_JSON = (*HEAVY, "rich")
"""Never imported by a read command that prints JSON."""
FOR_RUNS_JSON = (*FOR_JSON, "sqlalchemy", "asyncio")
"""Never imported by ``runs --json`` on a current SQLite ledger: it reads it with sqlite3."""


# Runs the console entry point like `stageline ARGS`, then prints which heavy top-level
# packages the process imported, as JSON on stderr's last line.
PROBE = """
import atexit, json, sys
heavy = {heavy!r}
atexit.register(lambda: print(json.dumps(sorted(
    {{m.split(".")[0] for m in sys.modules}} & set(heavy))), file=sys.stderr))
sys.argv = ["stageline", *sys.argv[1:]]
from stageline.cli import main
main()
"""


def _probe(
    cwd: Path, env: dict[str, str], *args: str, heavy: tuple[str, ...] = HEAVY
) -> tuple[int, list[str], str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=heavy), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    *_, last = done.stderr.strip().splitlines()
    return done.returncode, json.loads(last), done.stdout


def test_importing_the_cli_imports_no_langgraph(tmp_path: Path, cli_env: dict[str, str]) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, stageline.cli; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{AT_START!r})))",
        ],
        cwd=tmp_path,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(done.stdout) == []


READ_COMMANDS = [
    ("--help",),
    ("token", "--help"),
    ("token", "list", "--json"),
    ("token", "list"),
    ("runs", "--json"),
    ("runs",),
    ("logs", "blog1", "--json"),
    ("logs", "blog1"),
    ("pending", "--json"),
    ("pending", "blog1"),
    ("stats", "--json"),
    ("stats",),
    ("show", "blog1", "--json"),
    ("show", "blog1"),
]
NEVER_IMPORTED = {("--help",): AT_START, ("runs", "--json"): FOR_RUNS_JSON}
"""What these read commands never import (the others: ``FOR_JSON`` or ``HEAVY``)."""


def test_help_and_read_commands_import_no_langgraph_procrastinate_or_httpx(
    tmp_path: Path, cli_env: dict[str, str], blog_waiting: str
) -> None:
    for args in READ_COMMANDS:
        heavy_here = NEVER_IMPORTED.get(args, FOR_JSON if "--json" in args else HEAVY)
        code, heavy, out = _probe(tmp_path, cli_env, *args, heavy=heavy_here)
        assert (args, code, heavy) == (args, 0, []), out
        if args == ("runs", "--json"):  # the read really read the ledger
            assert [r["run_id"] for r in json.loads(out)] == [blog_waiting]
        if args == ("pending", "blog1"):
            assert "editor_approval" in out
        if args == ("show", "blog1", "--json"):  # the state came from the checkpoint
            shown = json.loads(out)
            assert shown["state"]["topic"] == "durable pipelines"
            assert [r["critic"] for r in shown["state"]["reviews"]] == ["critic_a", "critic_b"]
            assert shown["checkpoint_error"] is None


def test_show_reads_runs_on_postgres_without_langgraph(
    tmp_path: Path, cli_env: dict[str, str], postgres_url: str
) -> None:
    """A waiting run and a finished one, each with its checkpoint, read from Postgres."""
    env = {**cli_env, "STAGELINE_DATABASE_URL": postgres_url}

    async def made() -> None:  # in this process: only ``show`` is under test
        async with Runner.open(load_settings(cwd=tmp_path, env=env)) as runner:
            await runner.start("blog_post", {"topic": "on postgres"}, run_id="pg1")
            await runner.start("blog_post", {"topic": "done"}, run_id="pg2")
            await runner.approve("pg2")

    asyncio.run(made())
    for run_id in ("pg1", "pg2"):
        code, heavy, out = _probe(tmp_path, env, "show", run_id, "--json")
        assert (code, heavy) == (0, []), out
        assert json.loads(out)["state"]["reviews"], out
        code, heavy, out = _probe(tmp_path, env, "show", run_id)
        assert (code, heavy) == (0, []), out
        if run_id == "pg1":
            assert "waiting at gate editor_approval" in out


def test_a_write_command_in_the_same_project_does_import_langgraph(
    tmp_path: Path, cli_env: dict[str, str], blog_waiting: str
) -> None:
    """The probe can fail: advancing a run needs LangGraph, and the probe sees it."""
    code, heavy, _ = _probe(tmp_path, cli_env, "reject", blog_waiting)
    assert code == 1  # the run ends rejected
    assert "langgraph" in heavy


def _whole_app(args: list[str]) -> int:
    """``args`` through the app with every command built, as before the cut."""
    try:
        done = typer.main.get_command(app).main(
            args=args, prog_name="stageline", standalone_mode=False
        )
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.TyperException as exc:
        exc.show()
        return EXIT_USAGE
    return done if isinstance(done, int) else 0


def _names() -> list[str]:
    commands = [
        info.name or typer.main.get_command_name(info.callback.__name__)
        for info in app.registered_commands
        if info.callback is not None
    ]
    return [*commands, *(str(info.name) for info in app.registered_groups)]


def test_a_command_started_alone_helps_and_refuses_as_in_the_whole_app(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A process builds only the command it runs; its help and usage errors do not change."""
    assert {"runs", "show", "logs", "pending", "stats", "db", "token"} <= set(_names())
    cases = [[name, "--help"] for name in _names()]
    cases += [["runs", "--bogus"], ["runs", "--limit", "0"], ["show"], ["token", "nope"]]
    cases += [["nope"], ["--version"], ["--help"], ["--bogus", "runs"], [], ["-h", "--help"]]
    for args in cases:
        code = run_cli(args)
        cut = capsys.readouterr()
        assert (args, code, cut) == (args, _whole_app(args), capsys.readouterr())
    assert len(_cut_to_command(["runs", "--json"]).registered_commands) == 1
    assert _cut_to_command(["token", "list"]).registered_commands == []
    assert _cut_to_command(["nope"]) is app
