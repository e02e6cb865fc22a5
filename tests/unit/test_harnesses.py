"""The harness adapters, for real: subprocesses, process groups, environments, chat streams."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessageChunk
from langchain_core.outputs import ChatGenerationChunk

from stageline.errors import HarnessNotReady
from stageline.harnesses import (
    ChatHarness,
    CommandHarness,
    HarnessEvent,
    HarnessRequest,
    HarnessResult,
    HarnessStatus,
    ScriptedHarness,
    make_harness,
)


def request(repo: Path, **changes: Any) -> HarnessRequest:
    fields: dict[str, Any] = {
        "kind": "command",
        "model": None,
        "repo_root": repo,
        "prompt": "do the thing",
        "timeout": 30.0,
    }
    fields.update(changes)
    return HarnessRequest(**fields)


async def collect(harness: Any, req: HarnessRequest) -> tuple[list[HarnessEvent], HarnessResult]:
    events: list[HarnessEvent] = []
    result: HarnessResult | None = None
    async for item in harness.run(req):
        assert result is None, "the result must be the last item"
        if isinstance(item, HarnessResult):
            result = item
        else:
            events.append(item)
    assert result is not None
    return events, result


def python(code: str, **options: Any) -> CommandHarness:
    return CommandHarness([sys.executable, "-c", textwrap.dedent(code)], **options)


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return "\nState:\tZ" not in status


def wait_gone(pids: list[int], within: float = 5.0) -> list[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


# -- command ------------------------------------------------------------------------------------


async def test_command_streams_generic_events_and_reads_the_prompt(tmp_path: Path) -> None:
    harness = python("""
        import json, sys
        prompt = sys.stdin.read()
        print(json.dumps({"type": "message", "text": "got: " + prompt}))
        print(json.dumps({"type": "usage", "input_tokens": 7, "output_tokens": 2}))
        print("garbage")
        print(json.dumps({"type": "result", "status": "succeeded", "summary": "ok"}))
    """)
    events, result = await collect(harness, request(tmp_path))
    assert [e.kind for e in events] == ["message", "usage", "warning", "result"]
    assert events[0].text == "got: do the thing"
    assert result.status is HarnessStatus.SUCCEEDED
    assert result.summary == "ok" and result.usage == {"input_tokens": 7, "output_tokens": 2}
    assert result.exit_code == 0


async def test_non_zero_exit_is_a_failed_result_with_stderr(tmp_path: Path) -> None:
    harness = python("""
        import json, sys
        print(json.dumps({"type": "message", "text": "trying"}))
        sys.stderr.write("warming up\\nfatal: no credentials\\n")
        sys.exit(3)
    """)
    events, result = await collect(harness, request(tmp_path))
    assert [e.kind for e in events] == ["message"]
    assert result.status is HarnessStatus.FAILED and result.exit_code == 3
    assert result.summary == "the agent exited with code 3: fatal: no credentials"
    assert "warming up" in result.stderr


async def test_only_allowlisted_environment_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGELINE_TEST_SECRET", "s3cret")
    monkeypatch.setenv("STAGELINE_TEST_OPEN", "fine")
    harness = python("""
        import json, os
        print(json.dumps({"type": "message", "text": json.dumps(sorted(os.environ))}))
    """)
    events, _ = await collect(harness, request(tmp_path, env_allowlist=("STAGELINE_TEST_OPEN",)))
    seen = json.loads(events[0].text)
    assert "STAGELINE_TEST_OPEN" in seen
    assert "STAGELINE_TEST_SECRET" not in seen and "PATH" not in seen


@pytest.mark.timeout(40)  # the harness sleeps 60 s unless its 1 s timeout kills it
async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    harness = python(f"""
        import json, os, subprocess, sys, time
        child = subprocess.Popen(["sleep", "60"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print(json.dumps({{"type": "status", "text": "started", "pid": os.getpid()}}), flush=True)
        time.sleep(60)
    """)
    events, result = await collect(harness, request(tmp_path, timeout=1.0))
    assert result.status is HarnessStatus.TIMED_OUT
    assert "timed out after 1s" in result.summary
    pids = [int(events[0].data["pid"]), int(pidfile.read_text())]
    assert wait_gone(pids) == []


async def test_timeout_kills_children_that_ignore_sigterm(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    harness = python(
        f"""
        import json, os, signal, subprocess, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 60"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print(json.dumps({{"type": "status", "pid": os.getpid()}}), flush=True)
        time.sleep(60)
    """,
        kill_grace=0.3,
    )
    events, result = await collect(harness, request(tmp_path, timeout=1.0))
    assert result.status is HarnessStatus.TIMED_OUT
    assert wait_gone([int(events[0].data["pid"]), int(pidfile.read_text())]) == []


@pytest.mark.timeout(25)  # a child holding the pipe would hold the run 30 s, then time out
async def test_children_left_behind_on_exit_are_killed_and_do_not_hold_the_run(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "child.pid"
    harness = python(f"""
        import json, subprocess
        child = subprocess.Popen(["sleep", "60"])  # inherits our stdout: keeps the pipe open
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print(json.dumps({{"type": "message", "text": "done"}}), flush=True)
    """)
    _, result = await collect(harness, request(tmp_path, timeout=30))
    assert result.status is HarnessStatus.SUCCEEDED
    assert wait_gone([int(pidfile.read_text())]) == []


async def test_a_caller_that_stops_listening_kills_the_agent(tmp_path: Path) -> None:
    harness = python("""
        import json, os, time
        print(json.dumps({"type": "status", "pid": os.getpid()}), flush=True)
        time.sleep(60)
    """)
    stream = harness.run(request(tmp_path))
    first = await anext(stream)
    assert isinstance(first, HarnessEvent)
    await stream.aclose()  # type: ignore[attr-defined]
    assert wait_gone([int(first.data["pid"])]) == []


async def test_missing_binary_is_not_ready(tmp_path: Path) -> None:
    harness = CommandHarness(["no-such-agent-binary-xyz", "--json"])
    with pytest.raises(HarnessNotReady, match="'no-such-agent-binary-xyz' not found"):
        await harness.ensure_ready(request(tmp_path))


async def test_required_environment_and_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = CommandHarness(
        [sys.executable], required_env=("STAGELINE_TEST_KEY",), needs_model=True
    )
    monkeypatch.delenv("STAGELINE_TEST_KEY", raising=False)
    with pytest.raises(HarnessNotReady, match="needs STAGELINE_TEST_KEY set"):
        await harness.ensure_ready(request(tmp_path))
    monkeypatch.setenv("STAGELINE_TEST_KEY", "k")
    with pytest.raises(HarnessNotReady, match="not in the environment allowlist"):
        await harness.ensure_ready(request(tmp_path))
    allow = ("PATH", "STAGELINE_TEST_KEY")
    with pytest.raises(HarnessNotReady, match="needs a model"):
        await harness.ensure_ready(request(tmp_path, env_allowlist=allow))
    await harness.ensure_ready(request(tmp_path, env_allowlist=allow, model="m"))


def fake_agent(folder: Path, name: str, lines: list[dict[str, Any]]) -> Path:
    """An executable named like a real agent, printing a canned stream after reading stdin."""
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(
        f"#!{sys.executable}\nimport sys\nsys.stdin.read()\nargs = sys.argv[1:]\n"
        f"sys.stderr.write(' '.join(args))\n"
        + "".join(f"print({json.dumps(json.dumps(line))})\n" for line in lines)
    )
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


async def test_claude_preset_runs_a_claude_shaped_agent(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_agent(
        bin_dir,
        "claude",
        [
            {"type": "system", "subtype": "init", "session_id": "s"},
            {"type": "assistant", "message": {"content": [{"type": "text", "text": "Done it."}]}},
            {
                "type": "result",
                "subtype": "success",
                "result": "Done it.",
                "usage": {"output_tokens": 5},
            },
        ],
    )
    harness = make_harness("command:claude")
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    req = request(tmp_path, model="sonnet")
    old = os.environ["PATH"]
    os.environ["PATH"] = env["PATH"]
    try:
        await harness.ensure_ready(req)
        events, result = await collect(harness, req)
    finally:
        os.environ["PATH"] = old
    assert [e.kind for e in events] == ["provider_session", "message", "usage", "result"]
    assert result.ok and result.summary == "Done it." and result.usage["output_tokens"] == 5
    assert result.session_id == "s"
    assert "--output-format stream-json --verbose" in result.stderr
    assert "--model sonnet" in result.stderr


def test_codex_preset_reads_the_prompt_from_stdin(tmp_path: Path) -> None:
    harness = make_harness("command:codex")
    assert isinstance(harness, CommandHarness) and harness.format == "codex"
    argv = harness.argv(request(tmp_path, model="o4"))
    assert argv[:3] == ["codex", "exec", "--json"] and argv[-1] == "-" and "-m" in argv


def test_registry_names_each_kind() -> None:
    assert make_harness("scripted").kind == "scripted"
    assert make_harness("chat").kind == "chat"
    assert make_harness("command", argv=["x"]).kind == "command"
    for bad, why in [
        ("bogus", "unknown harness 'bogus'"),
        ("command:nope", "unknown command agent"),
        ("command", "needs an agent"),
        ("scripted:x", "takes no ':x'"),
    ]:
        with pytest.raises(HarnessNotReady, match=why):
            make_harness(bad)


# -- scripted -----------------------------------------------------------------------------------


async def test_scripted_agent_really_edits_files(tmp_path: Path) -> None:
    harness = ScriptedHarness(
        [
            {"event": {"type": "message", "text": "writing"}},
            {"write": "wiki/page.md", "content": "hello\n"},
            {"delete": "old.txt"},
        ]
    )
    (tmp_path / "old.txt").write_text("x")
    req = request(tmp_path, kind="scripted")
    await harness.ensure_ready(req)
    events, result = await collect(harness, req)
    assert (tmp_path / "wiki" / "page.md").read_text() == "hello\n"
    assert not (tmp_path / "old.txt").exists()
    assert [e.kind for e in events] == ["message", "tool_use", "file_change", "file_change"]
    assert result.ok and result.summary == "writing"


async def test_scripted_agent_refuses_paths_outside_the_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _, result = await collect(
        ScriptedHarness([{"write": "../escape.md", "content": "x"}]), request(repo, kind="scripted")
    )
    assert not result.ok and result.exit_code == 2
    assert not (tmp_path / "escape.md").exists()


async def test_scripted_needs_a_valid_script(tmp_path: Path) -> None:
    with pytest.raises(HarnessNotReady, match="no script"):
        await ScriptedHarness().ensure_ready(request(tmp_path))
    with pytest.raises(HarnessNotReady, match="step 1 has none of"):
        await ScriptedHarness().ensure_ready(request(tmp_path, options={"script": [{"nope": 1}]}))


# -- chat ---------------------------------------------------------------------------------------


class UsageFakeChat(GenericFakeChatModel):
    """The fake chat model, ending its stream with a usage chunk as providers do."""

    def _stream(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Iterator[ChatGenerationChunk]:
        for chunk in super()._stream(messages, stop=stop, run_manager=run_manager, **kwargs):
            chunk.message.chunk_position = None  # type: ignore[attr-defined]
            yield chunk
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                usage_metadata={
                    "input_tokens": 5,
                    "output_tokens": 3,
                    "total_tokens": 8,
                    "input_token_details": {"cache_read": 2},
                },
            )
        )


class BrokenChat(GenericFakeChatModel):
    def _stream(self, *args: Any, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        yield ChatGenerationChunk(message=AIMessageChunk(content="partial"))
        raise ConnectionError("provider went away")


async def test_chat_streams_text_deltas_then_message_and_usage(tmp_path: Path) -> None:
    harness = ChatHarness(UsageFakeChat(messages=iter(["hello big world"])))
    req = request(tmp_path, kind="chat")
    await harness.ensure_ready(req)
    events, result = await collect(harness, req)
    deltas = [e.text for e in events if e.kind == "text_delta"]
    assert "".join(deltas) == "hello big world" and len(deltas) == 5
    assert [e.kind for e in events if e.kind != "text_delta"] == ["message", "usage"]
    assert result.ok and result.output_text == "hello big world"
    assert result.usage == {
        "input_tokens": 5,
        "output_tokens": 3,
        "total_tokens": 8,
        "cached_input_tokens": 2,
    }


async def test_chat_usage_has_a_cost_for_a_priced_model(tmp_path: Path) -> None:
    harness = ChatHarness(UsageFakeChat(messages=iter(["hi"])))
    req = request(tmp_path, kind="chat", model="gpt-5-mini")
    _, result = await collect(harness, req)
    assert result.usage["cost"] == pytest.approx((3 * 0.25 + 2 * 0.025 + 3 * 2.0) / 1e6)


async def test_chat_provider_failure_is_a_failed_result(tmp_path: Path) -> None:
    _, result = await collect(ChatHarness(BrokenChat(messages=iter([]))), request(tmp_path))
    assert result.status is HarnessStatus.FAILED
    assert result.summary == "ConnectionError: provider went away"
    assert result.output_text == "partial"


async def test_chat_without_a_model_is_not_ready(tmp_path: Path) -> None:
    with pytest.raises(HarnessNotReady, match="needs a model"):
        await ChatHarness().ensure_ready(request(tmp_path))
