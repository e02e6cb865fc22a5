"""Run inputs from the command line: ``-i key=value``, ``-i key:=<json>``, ``--input-file``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from stageline.errors import InputError

__all__ = [
    "parse_answers",
    "parse_assignment",
    "parse_deadlines",
    "parse_inputs",
    "read_input_file",
]


def shown(raw: str) -> str:
    """``raw`` as an error message quotes it (``stageline.plaindata``, imported when needed:
    it loads YAML, which the command line does not need to start)."""
    from stageline.plaindata import shown as quoted

    return quoted(raw)


def parse_assignment(raw: str, flag: str = "-i") -> tuple[str, Any]:
    """``key=value`` (a string) or ``key:=<json>`` (parsed as JSON)."""
    key, sep, value = raw.partition("=")
    if not sep:
        raise InputError(f"{flag} {shown(raw)}: expected key=value (a string) or key:=<json>")
    as_json = key.endswith(":")
    if as_json:
        key = key[:-1]
    key = key.strip()
    if not key:
        raise InputError(f"{flag} {shown(raw)}: the key before '=' is empty")
    if not as_json:
        return key, value
    try:
        return key, json.loads(value)
    except json.JSONDecodeError as exc:
        raise InputError(f"{flag} {shown(raw)}: the value after ':=' is not JSON ({exc})") from exc


def read_input_file(name: str, flag: str = "--input-file") -> dict[str, Any]:
    """A JSON or YAML mapping from a file (``-`` reads standard input)."""
    import yaml

    from stageline.plaindata import check_plain_inputs, load_plain_yaml

    label = f"{flag} {name}"
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(f"{label}: cannot read it: {reason}") from exc
    try:
        data = json.loads(text) if name.endswith(".json") else load_plain_yaml(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}"
        problem = getattr(exc, "problem", None)
        if isinstance(exc, yaml.MarkedYAMLError) and problem:
            first = problem
        raise InputError(f"{label}: not valid JSON or YAML{where}: {first[:200]}") from exc
    except ValueError as exc:  # a value JSON cannot hold, named with its key and line
        raise InputError(f"{label}: {str(exc)[:300]}") from exc
    except RecursionError as exc:
        raise InputError(f"{label}: nests too deeply") from exc
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise InputError(f"{label}: must hold a mapping of names to values")
    check_plain_inputs(data, f"{label}: key")
    return data


def parse_inputs(assignments: Iterable[str], input_file: str | None = None) -> dict[str, Any]:
    """The run's inputs: the file's mapping first, then each ``-i`` over it."""
    inputs = read_input_file(input_file) if input_file else {}
    for raw in assignments:
        key, value = parse_assignment(raw)
        inputs[key] = value
    return inputs


def parse_answers(assignments: Iterable[str], answer_file: str | None = None) -> dict[str, Any]:
    """Answers by question id: the file's mapping first, then each ``-a id=value`` over it."""
    answers = read_input_file(answer_file, "--answer-file") if answer_file else {}
    for raw in assignments:
        key, value = parse_assignment(raw, "-a")
        answers[key] = value
    return answers


def parse_deadlines(assignments: Iterable[str]) -> dict[str, str]:
    """``--deadline node=duration`` options as a mapping (durations are checked by the runner)."""
    out: dict[str, str] = {}
    for raw in assignments:
        node, sep, duration = raw.partition("=")
        if not sep or not node.strip() or not duration.strip():
            raise InputError(f"--deadline {shown(raw)}: expected NODE=DURATION, e.g. review=2h")
        out[node.strip()] = duration.strip()
    return out
