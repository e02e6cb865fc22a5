"""One exit-code table: every run status has its code, and the README, ``stageline --help``,
each advancing command's ``--help`` and ``cli/_codes.py`` say the same."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stageline.cli._codes import (
    ADVANCE_EPILOG,
    NOT_AN_ENDING,
    TABLE,
    exit_code_for,
)
from stageline.cli._main import run_cli
from stageline.ledger import RunStatus

README = Path(__file__).resolve().parents[2] / "README.md"

EXPECTED = {
    RunStatus.SUCCEEDED: 0,
    RunStatus.TAKEN_OVER: 0,
    RunStatus.FAILED: 1,
    RunStatus.CANCELLED: 1,
    RunStatus.REJECTED: 1,
    RunStatus.QUEUED: 1,
    RunStatus.RUNNING: 1,
    RunStatus.WAITING: 3,
    RunStatus.PARKED: 7,
    RunStatus.STOPPED: 130,
}
"""Where a run stopped -> what the command that advanced it exits with."""

ADVANCING = ("run", "resume", "retry", "approve", "reject", "changes", "takeover", "answer")


def _words(status: RunStatus) -> str:
    return str(status).replace("_", " ")


def _readme_codes() -> dict[int, str]:
    """The README's exit-code list: ``- `N` meaning`` lines after "Exit codes"."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("\nExit codes") :]
    section = section[: section.index("User errors never print a traceback")]
    found = dict(re.findall(r"^- `(\d+)` (.+)$", section, re.MULTILINE))
    return {int(code): meaning for code, meaning in found.items()}


def _help(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert run_cli([*args, "--help"]) == 0
    return " ".join(capsys.readouterr().out.split())


def _help_codes(text: str) -> dict[int, str]:
    """The root ``--help``'s table: each code and its (re-joined) meaning."""
    table = text[text.index("Exit codes:") + len("Exit codes:") :]
    parts = re.split(r"(?:^| )(\d+) (?=[a-z])", table)
    pairs = zip(parts[1::2], parts[2::2], strict=True)
    return {int(code): meaning.strip() for code, meaning in pairs}


def test_every_run_status_has_its_exit_code() -> None:
    assert set(EXPECTED) == set(RunStatus)
    assert {s: exit_code_for(s) for s in RunStatus} == EXPECTED


def test_readme_help_and_codes_list_the_same_codes_and_statuses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    readme = _readme_codes()
    shown = _help_codes(_help(capsys))
    table = dict(TABLE)
    assert set(readme) == set(table) == set(shown), (readme, shown)
    for code, meaning in table.items():
        assert shown[code] == " ".join(meaning.split()), code
    for status in RunStatus:
        if status in NOT_AN_ENDING:
            continue
        code = exit_code_for(status)
        assert _words(status) in readme[code], (status, readme[code])
        assert _words(status) in shown[code], (status, shown[code])
        assert _words(status) in table[code], (status, table[code])


@pytest.mark.parametrize("command", ADVANCING)
def test_each_advancing_command_says_it_exits_by_where_the_run_stopped(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    text = _help(capsys, command)
    assert " ".join(ADVANCE_EPILOG.replace("\b", "").split()) in text
    said = text[text.index("Exits by where the run stopped:") :]
    for status in RunStatus:
        if status not in NOT_AN_ENDING:
            assert re.search(rf"\b{exit_code_for(status)} (?:\w+ or )*{status}\b", said), status
