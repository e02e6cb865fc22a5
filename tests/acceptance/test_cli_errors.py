"""How the CLI reports what went wrong: one line and an exit code, a traceback only on request."""

from __future__ import annotations

from pathlib import Path

import pytest

from stageline.cli._codes import EXIT_INTERNAL
from stageline.cli._inputs import parse_assignment, parse_inputs
from stageline.cli._main import run_cli
from stageline.errors import InputError


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STAGELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("STAGELINE_DEBUG", raising=False)


def _boom(*args: object, **kwargs: object) -> None:
    raise RuntimeError("boom\nsecond line")


def test_an_unexpected_exception_is_one_line_and_exit_70(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("stageline.templates.list_templates", _boom)  # imported on use
    assert run_cli(["templates"]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "internal error: RuntimeError: boom (rerun with STAGELINE_DEBUG=1 for the traceback)"
    ]


def test_stageline_debug_shows_the_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("stageline.templates.list_templates", _boom)  # imported on use
    monkeypatch.setenv("STAGELINE_DEBUG", "1")
    assert run_cli(["templates"]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: boom" in err


def test_a_user_error_prints_error_and_its_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["graph", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown template 'nope'")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("topic=durable pipelines", ("topic", "durable pipelines")),
        ("topic=", ("topic", "")),
        ("url=a=b", ("url", "a=b")),
        ("n:=3", ("n", 3)),
        ('tags:=["a", "b"]', ("tags", ["a", "b"])),
        ('s:="x"', ("s", "x")),
    ],
)
def test_assignments(raw: str, expected: tuple[str, object]) -> None:
    assert parse_assignment(raw) == expected


def test_input_file_then_assignments_win(tmp_path: Path) -> None:
    (tmp_path / "in.json").write_text('{"topic": "file", "n": 1}')
    assert parse_inputs(["n:=2"], "in.json") == {"topic": "file", "n": 2}
    (tmp_path / "empty.yaml").write_text("")
    assert parse_inputs([], "empty.yaml") == {}
    with pytest.raises(InputError, match=r"^--input-file in.json: not valid JSON"):
        (tmp_path / "in.json").write_text("{")
        parse_inputs([], "in.json")
