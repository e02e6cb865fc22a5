"""The JSON-lines parsers on transcripts in each format, malformed and truncated lines included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stageline.harnesses import PARSERS, parse_lines
from stageline.operations import classify

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agents"


def _lines(*rows: object) -> list[str]:
    return [(row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows]


CLAUDE = _lines(
    {
        "type": "system",
        "subtype": "init",
        "session_id": "s-1",
        "model": "claude-x",
        "cwd": "/repo",
        "tools": ["Bash", "Edit"],
    },
    {
        "type": "stream_event",
        "event": {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Look"}},
    },
    {"type": "stream_event", "event": {"type": "message_start"}},
    {
        "type": "assistant",
        "session_id": "s-1",
        "parent_tool_use_id": None,
        "message": {
            "content": [
                {"type": "thinking", "thinking": "plan"},
                {"type": "text", "text": "Looking at the repo."},
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
            ]
        },
    },
    {
        "type": "user",
        "message": {
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": "README.md\n",
                    "is_error": False,
                }
            ]
        },
    },
    {
        "type": "assistant",
        "parent_tool_use_id": "task-9",
        "message": {"content": [{"type": "text", "text": "sub-agent here"}]},
    },
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "Wrote 2 pages.\nDone.",
        "total_cost_usd": 0.25,
        "num_turns": 3,
        "duration_ms": 900,
        "session_id": "s-1",
        "usage": {"input_tokens": 120, "output_tokens": 40, "service_tier": "standard"},
    },
)

CODEX = _lines(
    {"type": "thread.started", "thread_id": "th-1"},
    {"type": "turn.started"},
    {
        "type": "item.started",
        "item": {
            "id": "i0",
            "type": "command_execution",
            "command": "bash -lc ls",
            "status": "in_progress",
        },
    },
    {
        "type": "item.completed",
        "item": {
            "id": "i0",
            "type": "command_execution",
            "command": "bash -lc ls",
            "aggregated_output": "a\nb\n",
            "exit_code": 0,
            "status": "completed",
        },
    },
    {"type": "item.completed", "item": {"id": "i1", "type": "reasoning", "text": "thinking"}},
    {
        "type": "item.completed",
        "item": {
            "id": "i2",
            "type": "file_change",
            "status": "completed",
            "changes": [{"path": "wiki/a.md", "kind": "add"}],
        },
    },
    {
        "type": "item.started",
        "item": {
            "id": "i3",
            "type": "mcp_tool_call",
            "server": "docs",
            "tool": "search",
            "arguments": {"q": "x"},
        },
    },
    {
        "type": "item.updated",
        "item": {"id": "i4", "type": "todo_list", "items": [{"text": "write", "completed": False}]},
    },
    {"type": "item.completed", "item": {"id": "i5", "type": "error", "message": "retrying"}},
    {
        "type": "item.completed",
        "item": {"id": "i6", "type": "agent_message", "text": "Updated the wiki."},
    },
    {
        "type": "turn.completed",
        "usage": {"input_tokens": 50, "cached_input_tokens": 10, "output_tokens": 7},
    },
)

GENERIC = _lines(
    {"type": "provider_session", "text": "sess", "session_id": "g-1"},
    {"type": "text_delta", "text": "Hel"},
    {"type": "message", "text": "Hello."},
    {"type": "tool_use", "text": "write_file", "name": "write_file", "input": {"path": "a.md"}},
    {"type": "usage", "input_tokens": 3, "output_tokens": 4},
    {"type": "usage", "input_tokens": 1},
    {"type": "custom_progress", "text": "50%"},
    {"type": "result", "status": "succeeded", "summary": "all good", "output": "final text"},
)


def _fixture(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines(keepends=True)


# The recorded streams under tests/fixtures/agents follow the agents' own documented formats:
# Claude Code's headless mode / Agent SDK message types (`claude -p --output-format stream-json
# --verbose`, `--include-partial-messages` for `stream_event` lines; `system` subtypes `init`,
# `task_started`, `task_progress`, `task_notification`, `compact_boundary`; `result` with
# `subtype`, `is_error`, `errors`, `terminal_reason`, `usage`, `total_cost_usd`) and Codex's
# `codex exec --json` (openai/codex docs/exec.md and codex-rs/exec/src/exec_events.rs:
# thread.started, turn.started/completed/failed, item.started/updated/completed over
# agent_message, reasoning, command_execution, file_change, mcp_tool_call, web_search,
# todo_list and error items, and the top-level `error`).


def test_claude_session_every_event_classified() -> None:
    events, parser = parse_lines("claude", _fixture("claude_session.jsonl"))
    kinds = [e.kind for e in events]
    assert kinds == [
        "provider_session",
        "reasoning",
        "usage",
        "message",
        "tool_use",
        "tool_result",
        "tool_use",
        "usage",
        "helper_agent",
        "helper_agent",
        "helper_agent",
        "helper_agent",
        "warning",
        "helper_agent",
        "tool_result",
        "tool_use",
        "usage",
        "tool_result",
        "message",
        "usage",
        "usage",
        "result",
    ]
    assert {str(classify(e)) for e in events if e.kind == "helper_agent"} == {"tool"}
    started = events[8]
    assert started.text == "task_started: Survey the tests"
    assert started.data["task_id"] == "task_7" and started.data["tool_use_id"] == "toolu_02"
    assert events[12].data["line"] == "this line is not JSON {"
    # the tool call's line names what it acts on
    assert events[4].text == "Bash git ls-files | head -50"
    assert events[15].text == "Write /repo/wiki/overview.md"
    # one message over three lines counts its usage once; the result's total replaces the sum
    assert parser.usage["input_tokens"] == 12 + 5320 + 43640
    assert parser.usage["cached_input_tokens"] == 43640
    assert parser.usage["output_tokens"] == 1290
    assert parser.usage["cost"] == pytest.approx(0.0932)
    assert parser.session_id == "9f1c2b7e-3a4d-4c5e-8f60-1a2b3c4d5e6f"
    assert parser.failure is None
    assert parser.final_summary == "Wrote the overview page."


def test_claude_live_usage_estimates_cost_before_the_result() -> None:
    lines = _fixture("claude_session.jsonl")
    _, parser = parse_lines("claude", lines[:-1])  # everything but the result
    assert parser.usage["cost"] > 0
    assert parser.usage["cached_input_tokens"] == 11800 + 15920 + 15920
    assert parser.usage["input_tokens"] > parser.usage["cached_input_tokens"]


def test_claude_partial_messages_are_live_only() -> None:
    events, parser = parse_lines("claude", _fixture("claude_partial.jsonl"))
    assert [e.kind for e in events] == [
        "provider_session",
        "text_delta",
        "text_delta",
        "message",
        "usage",
        "tool_use",
        "tool_result",
        "status",
        "usage",
        "result",
    ]
    assert [classify(e) for e in events].count(None) == 2
    assert events[5].text == "Bash pytest -q"
    assert parser.output_text == "The tests pass."
    assert parser.usage["input_tokens"] == 6 + 23600 and parser.usage["cost"] == 0.0121


def test_claude_error_result_keeps_its_reasons_and_usage() -> None:
    events, parser = parse_lines("claude", _fixture("claude_error.jsonl"))
    errors = [e for e in events if e.kind == "error"]
    assert len(errors) == 1 and str(classify(errors[0])) == "error"
    assert "error_max_turns" in errors[0].text
    assert "Reached maximum number of turns (4)" in errors[0].text
    assert "terminal reason: max_turns" in errors[0].text
    assert parser.failure is not None and "Reached maximum number of turns" in parser.failure
    assert parser.usage["cost"] == 0.09 and parser.usage["output_tokens"] == 700


def test_claude_is_error_fails_whatever_the_subtype() -> None:
    _, parser = parse_lines(
        "claude",
        _lines(
            {
                "type": "result",
                "subtype": "success",
                "is_error": True,
                "result": "API Error: 529",
                "errors": [],
            }
        ),
    )
    assert parser.failure is not None and "API Error: 529" in parser.failure


def test_codex_session_every_event_classified() -> None:
    events, parser = parse_lines("codex", _fixture("codex_session.jsonl"), model="gpt-5-codex")
    assert [e.kind for e in events] == [
        "provider_session",
        "status",
        "reasoning",
        "tool_use",
        "tool_result",
        "status",
        "tool_use",
        "tool_result",
        "status",
        "tool_use",
        "tool_result",
        "tool_use",
        "tool_result",
        "warning",
        "warning",
        "warning",
        "status",
        "message",
        "usage",
        "status",
    ]
    changes = [e for e in events if e.data.get("name") == "file_change"]
    assert [e.kind for e in changes] == ["tool_use", "tool_result"]
    assert {str(classify(e)) for e in changes} == {"tool"}
    assert all(e.data["paths"] == ["/repo/wiki/overview.md"] for e in changes)
    assert "add /repo/wiki/overview.md" in changes[0].text
    reconnect = events[13]
    assert reconnect.text == "Reconnecting... 1/5" and str(classify(reconnect)) == "tool"
    assert events[14].data["line"].startswith('{"type": "item.completed"')
    assert parser.failure is None  # the reconnect was followed by a completed turn
    assert parser.session_id == "0199a213-81c0-7800-8aa1-bbab2a035a53"
    assert parser.usage["input_tokens"] == 24763 and parser.usage["cached_input_tokens"] == 24448
    assert parser.usage["cost"] > 0  # estimated: Codex reports no cost
    assert events[18].text.startswith("24763 in (24448 cached), 122 out, $")
    assert events[18].data["cost_estimated"] is True
    assert parser.output_text == "Added wiki/overview.md describing the app."


def test_codex_failed_turn() -> None:
    events, parser = parse_lines("codex", _fixture("codex_failed_turn.jsonl"))
    assert [e.kind for e in events] == [
        "provider_session",
        "status",
        "reasoning",
        "warning",
        "error",
        "error",
    ]
    assert parser.failure is not None and parser.failure.startswith("stream disconnected")


def test_codex_error_without_a_turn_end_fails() -> None:
    _, parser = parse_lines(
        "codex", _lines({"type": "turn.started"}, {"type": "error", "message": "quota exceeded"})
    )
    assert parser.failure == "quota exceeded"


def test_generic_format() -> None:
    events, parser = parse_lines("generic", GENERIC)
    assert [e.kind for e in events] == [
        "provider_session",
        "text_delta",
        "message",
        "tool_use",
        "usage",
        "usage",
        "custom_progress",
        "result",
    ]
    assert events[3].data == {"name": "write_file", "input": {"path": "a.md"}}
    assert parser.usage == {"input_tokens": 4, "output_tokens": 4}
    assert parser.output_text == "final text"
    assert parser.final_summary == "all good"


def test_generic_failed_result() -> None:
    _, parser = parse_lines(
        "generic", _lines({"type": "result", "status": "failed", "summary": "could not write"})
    )
    assert parser.failure == "could not write"


@pytest.mark.parametrize("fmt", sorted(PARSERS))
@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("this is not json\n", "malformed line, not JSON"),
        ('{"type": "message", "text": "cut\n', "malformed line, not JSON"),
        ("[1, 2, 3]\n", "malformed line, a JSON list"),
        ('"just a string"\n', "malformed line, a JSON str"),
        ('{"type": "message", "te', "truncated line at the end of the stream"),
    ],
)
def test_malformed_and_truncated_lines_become_warnings(fmt: str, line: str, why: str) -> None:
    good = {"claude": CLAUDE, "codex": CODEX, "generic": GENERIC}[fmt]
    events, _ = parse_lines(fmt, [good[0], line])
    assert events[-1].kind == "warning"
    assert events[-1].text.startswith(why)
    assert events[-1].data["line"] == line.strip()[:200]
    assert events[-1].data["format"] == fmt


@pytest.mark.parametrize("fmt", sorted(PARSERS))
def test_a_stream_cut_mid_way_keeps_what_came_before(fmt: str) -> None:
    good = {"claude": CLAUDE, "codex": CODEX, "generic": GENERIC}[fmt]
    text = "".join(good)
    cut = text[: len(text) - 15]  # the last line loses its end and its newline
    events, _ = parse_lines(fmt, cut.splitlines(keepends=True))
    full, _ = parse_lines(fmt, good)
    assert events[-1].kind == "warning" and "truncated" in events[-1].text
    assert [e.kind for e in events[:-1]] == [e.kind for e in full][: len(events) - 1]


@pytest.mark.parametrize("fmt", sorted(PARSERS))
def test_odd_shapes_never_raise(fmt: str) -> None:
    odd = _lines(
        {"type": "assistant", "message": {"content": 5}},
        {"type": "item.completed", "item": "x"},
        {"type": None},
        {},
        {"type": 3},
        {"type": "user", "message": None},
        {"type": "result", "usage": "lots"},
    )
    events, _ = parse_lines(fmt, [*odd, "\n", "   \n"])
    assert all(e.kind for e in events)


def test_generic_line_without_type_is_a_warning() -> None:
    events, _ = parse_lines("generic", _lines({"text": "no type"}))
    assert [e.kind for e in events] == ["warning"]
    assert "needs a string `type`" in events[0].text
