"""Output a person can trust: at 60 and 80 columns and piped, no table splits a node name, a
run id, a checkpoint id or a path across lines; ``show`` and ``logs`` agree on a gate's work
and its wait; ``runs`` prints the duration the run's command printed; plain ``logs`` shows a
stage log's fields; ``token list`` is a plain table like the others; a question's context and
what it asks are on lines of their own."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from _procs import cli, cli_env

from stageline.templates.builtin.blog_post import template

NODES = list(template.nodes)
WIDTHS = {"COLUMNS=60": "60", "COLUMNS=80": "80", "piped": ""}
"""How each command is run: a narrow and a standard terminal, and piped (no COLUMNS: 80)."""


@dataclass
class Project:
    root: Path
    env: dict[str, str]
    printed: dict[str, str]
    """What the commands that made the runs printed, by run id."""
    words: dict[str, list[str]]
    """b1's post path (``POST``) and checkpoint ids (``CHECKPOINTS``)."""

    def run(self, *args: str, columns: str = "200") -> subprocess.CompletedProcess[str]:
        # A hang guard only: on a loaded machine a command can take long.
        return cli(list(args), self.root, {**self.env, "COLUMNS": columns}, timeout=900)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """b1: blog_post sent back once with a note, then approved (so its gate waited twice);
    s1: sdlc waiting at its first question set; a token with a long name."""
    root = tmp_path_factory.mktemp("whole")
    made = Project(root, cli_env(root / "home"), {}, {})
    topic = "retry budgets for durable pipelines"
    started = made.run("run", "blog_post", "-i", f"topic={topic}", "--run-id", "b1")
    assert started.returncode == 3, (started.stdout, started.stderr)
    sent = made.run("changes", "b1", "--note", "Make it shorter and add an example.")
    assert sent.returncode == 3, (sent.stdout, sent.stderr)
    approved = made.run("approve", "b1")
    assert approved.returncode == 0, (approved.stdout, approved.stderr)
    made.printed["b1"] = approved.stdout
    asked = made.run("run", "sdlc", "-i", "task=add rate limiting", "--run-id", "s1")
    assert asked.returncode == 3, (asked.stdout, asked.stderr)
    made.printed["s1"] = asked.stdout
    token = made.run("token", "create", "a-token-with-a-rather-long-name-for-tests")
    assert token.returncode == 0, token.stderr
    made.words["POST"] = [json.loads(made.run("show", "b1", "--json").stdout)["state"]["post_path"]]
    history = json.loads(made.run("history", "b1", "--json").stdout)
    made.words["CHECKPOINTS"] = [c["checkpoint_id"] for c in history]
    return made


COMMANDS = {
    "runs": (("runs",), ["b1", "s1", "blog_post", "sdlc"]),
    "show": (("show", "b1"), ["b1", *NODES, "POST"]),
    "history": (("history", "b1"), [*NODES, "CHECKPOINTS"]),
    "logs": (("logs", "b1"), [*NODES, "POST"]),
    "pending": (("pending",), ["s1", "sdlc", "clarify"]),
    "stats": (("stats",), NODES),
    "templates": (("templates",), ["blog_post", "stageline.templates.builtin.blog_post"]),
    "token list": (("token", "list"), ["a-token-with-a-rather-long-name-for-tests"]),
}


@pytest.mark.parametrize("command", COMMANDS)
def test_no_table_splits_a_name_an_id_or_a_path(project: Project, command: str) -> None:
    args, expected = COMMANDS[command]
    words = [w for e in expected for w in project.words.get(e, [e])]
    for how, columns in WIDTHS.items():
        done = project.run(*args, columns=columns)
        assert done.returncode == 0, (command, how, done.stderr)
        out = done.stdout
        lines = out.splitlines()
        for word in words:
            # Whole, on one line: a word folded across lines would be missing as a whole.
            assert any(word in line for line in lines), (command, how, word, out)
        assert "…" not in out, (command, how, out)
        assert not set(out) & set("┏┃━│─┡╇╭╮╰╯"), (command, how, out)  # one plain style
        width = int(columns or 80)
        for line in [] if command == "logs" else lines:  # a log line is one event, unwrapped
            # Wider than the console only where the line holds one long unbreakable word.
            assert len(line.rstrip()) <= width or any(len(w) > width // 2 for w in line.split()), (
                command,
                how,
                line,
            )


def _column(out: str, row: str, column: str) -> list[str]:
    """The values of ``column`` in the node table's rows that start with ``row``, in order."""
    out = out.split("\ndecisions\n")[0]
    header = next(line for line in out.splitlines() if line.startswith("node "))
    at = header.split().index(column)
    return [line.split()[at] for line in out.splitlines() if line.startswith(row + " ")]


def _seconds(text: str) -> float:
    assert text.endswith("s") and text != "-", text
    return float(text[:-1])


def test_show_prints_a_gates_work_and_its_wait_apart_as_logs_does(project: Project) -> None:
    shown = project.run("show", "b1", columns="80").stdout
    header = next(line for line in shown.splitlines() if line.startswith("node "))
    assert "work" in header.split() and "waited" in header.split(), shown
    assert set(_column(shown, "research", "waited")) == {"-"}, shown
    work = [_seconds(t) for t in _column(shown, "editor_approval", "work")]
    waited = [_seconds(t) for t in _column(shown, "editor_approval", "waited")]
    assert len(waited) == 2, shown  # asked twice: once before the changes, once after
    records = json.loads(project.run("show", "b1", "--json").stdout)["records"]
    took = [r["duration"] for r in records if r["node"] == "editor_approval"]
    for whole, *parts in zip(took, work, waited, strict=True):
        assert whole == pytest.approx(sum(parts), abs=0.011), (took, work, waited)
    logs = project.run("logs", "b1").stdout
    said = [
        float(m.group(1))
        for m in re.finditer(r"node\.succeeded editor_approval \S+ \(waited ([\d.]+)s\)", logs)
    ]
    assert said == pytest.approx(waited, abs=0.011), (logs, shown)
    assert all(w < t for w, t in zip(work, waited, strict=True)), shown  # a person is slower


def test_runs_prints_the_duration_the_runs_command_printed(project: Project) -> None:
    said = re.search(r"run b1 succeeded in (\S+)", project.printed["b1"])
    assert said, project.printed["b1"]
    row = next(line for line in project.run("runs").stdout.splitlines() if line.startswith("b1 "))
    assert said.group(1) in row.split(), row
    header = project.run("show", "b1").stdout
    assert re.search(rf"^duration\s+{re.escape(said.group(1))}$", header, re.MULTILINE), header


def test_plain_logs_show_a_stage_logs_fields(project: Project) -> None:
    logs = project.run("logs", "b1", columns="80").stdout
    research = next(line for line in logs.splitlines() if "stage.log research" in line)
    assert 'topic="retry budgets for durable pipelines"' in research, research
    assert "audience=engineers" in research, research
    published = next(line for line in logs.splitlines() if "stage.log publish" in line)
    assert f"path={project.words['POST'][0]}" in published, published


def test_a_question_keeps_its_context_apart_from_what_it_asks(project: Project) -> None:
    for out in (project.printed["s1"], project.run("show", "s1", columns="80").stdout):
        lines = out.splitlines()
        task = next(i for i, line in enumerate(lines) if "Task: add rate limiting" in line)
        assert "What is in scope" not in lines[task], out
        assert lines[task + 1].strip() == "What is in scope, and what is not?", out
