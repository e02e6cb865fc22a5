"""Input checks of the built-in templates, run before a run exists (``add_input_check``).

Each raises ``InputError`` naming the input at fault: a path that does not exist or is of the
wrong kind, a folder outside any git repository, an unknown harness (required inputs are
declared with ``Template.require_input`` and checked before these). Relative paths are from
the working folder, as the templates resolve them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stageline.errors import HarnessNotReady, InputError
from stageline.harnesses import make_harness

__all__ = ["Check", "git_folder", "harness_spec", "path_input"]

Check = Callable[[Mapping[str, Any]], None]


def _path(value: Any) -> Path:
    path = Path(str(value)).expanduser()
    return (path if path.is_absolute() else Path.cwd() / path).resolve()


def path_input(key: str, *, kind: str | None = None, must_exist: bool = True) -> Check:
    """``key``, when given, names an existing path (``kind``: ``file`` or ``folder``)."""

    def check(inputs: Mapping[str, Any]) -> None:
        if inputs.get(key) in (None, ""):
            return
        if not isinstance(inputs[key], str):
            raise InputError(f"input {key!r} must be a path, got {type(inputs[key]).__name__}")
        path = _path(inputs[key])
        if not path.exists():
            if must_exist:
                raise InputError(f"input {key!r}: {inputs[key]} does not exist")
            return
        if kind == "folder" and not path.is_dir():
            raise InputError(f"input {key!r}: {inputs[key]} is a file, not a folder")
        if kind == "file" and not path.is_file():
            raise InputError(f"input {key!r}: {inputs[key]} is not a file")

    return check


def git_folder(key: str, *, needs_commit: bool = False) -> Check:
    """``key``'s path (or its nearest existing parent) is inside a git repository."""

    def check(inputs: Mapping[str, Any]) -> None:
        if not isinstance(inputs.get(key), str) or not inputs[key]:
            return
        probe = _path(inputs[key])
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if probe.is_file():
            probe = probe.parent
        args = (
            ["rev-parse", "--verify", "--quiet", "HEAD"]
            if needs_commit
            else ["rev-parse", "--show-toplevel"]
        )
        try:
            inside = (
                subprocess.run(
                    ["git", "-C", str(probe), "rev-parse", "--show-toplevel"],
                    capture_output=True,
                    check=False,
                ).returncode
                == 0
            )
            ok = (
                inside
                and subprocess.run(
                    ["git", "-C", str(probe), *args], capture_output=True, check=False
                ).returncode
                == 0
            )
        except FileNotFoundError as exc:
            raise InputError(
                "git is not installed; this template works in a git repository"
            ) from exc
        if not inside:
            raise InputError(
                f"input {key!r}: {inputs[key]} is not inside a git repository; "
                "run `git init` there first"
            )
        if not ok:
            raise InputError(
                f"input {key!r}: the repository at {inputs[key]} has no commit to "
                "branch from; commit first"
            )

    return check


def harness_spec(inputs: Mapping[str, Any]) -> None:
    """``harness``, when given, names a harness stageline knows."""
    spec = inputs.get("harness")
    if spec in (None, ""):
        return
    if not isinstance(spec, str):
        raise InputError(f"input 'harness' must be text, got {type(spec).__name__}")
    try:
        make_harness(spec)
    except HarnessNotReady as exc:
        raise InputError(f"input 'harness': {exc}") from exc
