"""The JSON-lines parsers on transcripts in each format, malformed and truncated lines included."""

from __future__ import annotations

import json

import pytest

from stageline.harnesses import PARSERS, parse_lines


def _lines(*rows: object) -> list[str]:
    return [(row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows]


CLAUDE = _lines(
    {"type": "system", "subtype": "init", "session_id": "s-1", "model": "claude-x",
     "cwd": "/repo", "tools": ["Bash", "Edit"]},
    {"type": "stream_event", "event": {"type": "content_block_delta",
                                       "delta": {"type": "text_delta", "text": "Look"}}},
    {"type": "stream_event", "event": {"type": "message_start"}},
    {"type": "assistant", "session_id": "s-1", "parent_tool_use_id": None, "message": {
        "content": [{"type": "thinking", "thinking": "plan"},
                    {"type": "text", "text": "Looking at the repo."},
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]}},
    {"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "README.md\n",
         "is_error": False}]}},
    {"type": "assistant", "parent_tool_use_id": "task-9", "message": {
        "content": [{"type": "text", "text": "sub-agent here"}]}},
    {"type": "result", "subtype": "success", "is_error": False, "result": "Wrote 2 pages.\nDone.",
     "total_cost_usd": 0.25, "num_turns": 3, "duration_ms": 900, "session_id": "s-1",
     "usage": {"input_tokens": 120, "output_tokens": 40, "service_tier": "standard"}},
)

CODEX = _lines(
    {"type": "thread.started", "thread_id": "th-1"},
    {"type": "turn.started"},
    {"type": "item.started", "item": {"id": "i0", "type": "command_execution",
                                      "command": "bash -lc ls", "status": "in_progress"}},
    {"type": "item.completed", "item": {"id": "i0", "type": "command_execution",
                                        "command": "bash -lc ls", "aggregated_output": "a\nb\n",
                                        "exit_code": 0, "status": "completed"}},
    {"type": "item.completed", "item": {"id": "i1", "type": "reasoning", "text": "thinking"}},
    {"type": "item.completed", "item": {"id": "i2", "type": "file_change", "status": "completed",
                                        "changes": [{"path": "wiki/a.md", "kind": "add"}]}},
    {"type": "item.started", "item": {"id": "i3", "type": "mcp_tool_call", "server": "docs",
                                      "tool": "search", "arguments": {"q": "x"}}},
    {"type": "item.updated", "item": {"id": "i4", "type": "todo_list",
                                      "items": [{"text": "write", "completed": False}]}},
    {"type": "item.completed", "item": {"id": "i5", "type": "error", "message": "retrying"}},
    {"type": "item.completed", "item": {"id": "i6", "type": "agent_message",
                                        "text": "Updated the wiki."}},
    {"type": "turn.completed", "usage": {"input_tokens": 50, "cached_input_tokens": 10,
                                         "output_tokens": 7}},
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


def test_claude_stream_json() -> None:
    events, parser = parse_lines("claude", CLAUDE)
    kinds = [e.kind for e in events]
    assert kinds == ["provider_session", "text_delta", "reasoning", "message", "tool_use",
                     "tool_result", "helper_agent", "usage", "result"]
    assert events[0].data["session_id"] == "s-1" and events[0].data["tools"] == 2
    assert events[4].data == {"id": "t1", "name": "Bash", "input": {"command": "ls"}}
    assert events[5].text == "README.md\n" and events[5].data["is_error"] is False
    assert events[6].data["parent_tool_use_id"] == "task-9" and events[6].data["event"] == "message"
    assert events[7].data == {"input_tokens": 120, "output_tokens": 40, "cost_usd": 0.25}
    assert parser.failure is None
    assert parser.output_text == "Wrote 2 pages.\nDone."
    assert parser.final_summary == "Wrote 2 pages."
    assert parser.usage["input_tokens"] == 120


def test_claude_error_result_is_a_failure() -> None:
    _, parser = parse_lines("claude", _lines(
        {"type": "result", "subtype": "error_max_turns", "is_error": True, "result": ""}))
    assert parser.failure == "error_max_turns"


def test_codex_exec_json() -> None:
    events, parser = parse_lines("codex", CODEX)
    kinds = [e.kind for e in events]
    assert kinds == ["provider_session", "status", "tool_use", "tool_result", "reasoning",
                     "file_change", "tool_use", "status", "warning", "message", "usage"]
    assert events[0].data["session_id"] == "th-1"
    assert events[3].data["exit_code"] == 0 and events[3].text == "a\nb\n"
    assert events[5].text == "wiki/a.md"
    assert events[6].text == "docs.search"
    assert parser.output_text == "Updated the wiki."
    assert parser.usage == {"input_tokens": 50, "cached_input_tokens": 10, "output_tokens": 7}
    assert parser.failure is None


def test_codex_failed_turn() -> None:
    events, parser = parse_lines("codex", _lines(
        {"type": "turn.failed", "error": {"message": "quota exceeded"}}, {"type": "error"}))
    assert [e.kind for e in events] == ["error", "error"]
    assert events[0].text == "quota exceeded"
    assert parser.failure is not None


def test_generic_format() -> None:
    events, parser = parse_lines("generic", GENERIC)
    assert [e.kind for e in events] == ["provider_session", "text_delta", "message", "tool_use",
                                        "usage", "usage", "custom_progress", "result"]
    assert events[3].data == {"name": "write_file", "input": {"path": "a.md"}}
    assert parser.usage == {"input_tokens": 4, "output_tokens": 4}
    assert parser.output_text == "final text"
    assert parser.final_summary == "all good"


def test_generic_failed_result() -> None:
    _, parser = parse_lines("generic", _lines({"type": "result", "status": "failed",
                                               "summary": "could not write"}))
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
    odd = _lines({"type": "assistant", "message": {"content": 5}},
                 {"type": "item.completed", "item": "x"}, {"type": None}, {}, {"type": 3},
                 {"type": "user", "message": None}, {"type": "result", "usage": "lots"})
    events, _ = parse_lines(fmt, [*odd, "\n", "   \n"])
    assert all(e.kind for e in events)


def test_generic_line_without_type_is_a_warning() -> None:
    events, _ = parse_lines("generic", _lines({"text": "no type"}))
    assert [e.kind for e in events] == ["warning"]
    assert "needs a string `type`" in events[0].text
