"""The ``command`` harness: a CLI coding agent as a subprocess, its JSON-lines stream parsed.

The agent runs in the repository, in a process group of its own, with only the allowlisted
environment. The prompt goes to its standard input. When the agent exits, times out or the
caller stops listening, the whole group is killed, so nothing it started outlives the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from stageline.errors import HarnessNotReady
from stageline.harnesses._parsers import PARSERS, StreamParser, first_line
from stageline.harnesses._types import (
    HarnessEvent,
    HarnessEventKind,
    HarnessRequest,
    HarnessResult,
    HarnessStatus,
    allowed_env,
)

__all__ = ["CommandHarness"]

MAX_LINE = 8 * 1024 * 1024
"""A stream line longer than this is skipped with a warning rather than held in memory."""
STDERR_TAIL = 16 * 1024
"""Bytes of standard error kept on the result."""
KILL_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL for a timed-out agent."""
EXIT_POLL = 0.05
"""Seconds between two looks at whether the agent exited."""
PIPE_WAIT = 5.0
"""Seconds to wait for the agent's pipes to close once its group is gone."""

Argv = Sequence[str] | Callable[[HarnessRequest], Sequence[str]]


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class _Lines:
    """Splits a byte stream into lines without asyncio's 64 KiB line limit."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self._stream = stream
        self._buf = bytearray()
        self._skipping = False

    async def next(self) -> tuple[str, bool, int] | None:
        """``(line, complete, oversize)``, None at the end; ``oversize`` > 0: a skipped line."""
        while True:
            cut = self._buf.find(b"\n")
            if cut >= 0:
                line = bytes(self._buf[:cut])
                del self._buf[: cut + 1]
                if self._skipping:
                    self._skipping = False
                    continue
                return line.decode("utf-8", "replace"), True, 0
            if len(self._buf) > MAX_LINE and not self._skipping:
                preview = bytes(self._buf[:200]).decode("utf-8", "replace")
                size = len(self._buf)
                self._buf.clear()
                self._skipping = True
                return preview, False, size
            if self._skipping:
                self._buf.clear()
            chunk = await self._stream.read(65536)
            if not chunk:
                if self._buf and not self._skipping:
                    line = bytes(self._buf)
                    self._buf.clear()
                    return line.decode("utf-8", "replace"), False, 0
                return None
            self._buf += chunk


class CommandHarness:
    """Runs ``argv`` in the repository and parses its stdout as ``fmt`` JSON lines."""

    kind = "command"

    def __init__(
        self,
        argv: Argv,
        *,
        fmt: str = "generic",
        required_env: Sequence[str] = (),
        needs_model: bool = False,
        kill_grace: float = KILL_GRACE,
        **future_kwargs: Any,
    ) -> None:
        if fmt not in PARSERS:
            raise HarnessNotReady(f"unknown stream format {fmt!r}; known: {', '.join(PARSERS)}")
        self._argv = argv
        self.format = fmt
        self.required_env = tuple(required_env)
        self.needs_model = needs_model
        self.kill_grace = kill_grace

    @classmethod
    def claude(cls, binary: str = "claude", *extra: str) -> CommandHarness:
        """Claude Code in print mode, streaming JSON, allowed to edit files in the repository.

        Request options: ``resume`` (a session id: ``--resume``), ``max_turns``
        (``--max-turns``) and ``max_cost`` (``--max-budget-usd``).
        """

        def argv(request: HarnessRequest) -> list[str]:
            opts = request.options
            more = ["--model", request.model] if request.model else []
            if opts.get("resume"):
                more += ["--resume", str(opts["resume"])]
            if opts.get("max_turns"):
                more += ["--max-turns", str(int(opts["max_turns"]))]
            if opts.get("max_cost"):
                more += ["--max-budget-usd", f"{float(opts['max_cost']):g}"]
            return [
                binary,
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--permission-mode",
                "acceptEdits",
                *more,
                *extra,
            ]

        return cls(argv, fmt="claude")

    @classmethod
    def codex(cls, binary: str = "codex", *extra: str) -> CommandHarness:
        """Codex ``exec --json``, sandboxed to write in the repository; the prompt on stdin.

        Request option ``resume`` (a thread id) continues that thread: ``codex exec resume ID``.
        """

        def argv(request: HarnessRequest) -> list[str]:
            model = ["-m", request.model] if request.model else []
            head = [binary, "exec", "--json", "--sandbox", "workspace-write", *model, *extra]
            thread = request.options.get("resume")
            return [*head, "resume", str(thread), "-"] if thread else [*head, "-"]

        return cls(argv, fmt="codex")

    def argv(self, request: HarnessRequest) -> list[str]:
        if callable(self._argv):
            return list(self._argv(request))
        values = {
            "{model}": request.model or "",
            "{title}": request.title or "",
            "{repo}": str(request.repo_root),
        }
        out = []
        for arg in self._argv:
            for key, value in values.items():
                arg = arg.replace(key, value)
            out.append(arg)
        return out

    async def ensure_ready(self, request: HarnessRequest, **future_kwargs: Any) -> None:
        argv = self.argv(request)
        if not argv:
            raise HarnessNotReady("the command harness has an empty command line")
        env = allowed_env(request.env_allowlist)
        binary = argv[0]
        if os.sep in binary:
            found = binary if os.access(binary, os.X_OK) and Path(binary).is_file() else None
        else:
            found = shutil.which(binary, path=env.get("PATH", ""))
        if found is None:
            raise HarnessNotReady(
                f"agent binary {binary!r} not found on the PATH the harness passes on; "
                "install it or give its full path"
            )
        for name in self.required_env:
            if name not in os.environ:
                raise HarnessNotReady(
                    f"the {self.format} agent needs {name} set in the environment"
                )
            if name not in request.env_allowlist:
                raise HarnessNotReady(f"{name} is required but not in the environment allowlist")
        if self.needs_model and not request.model:
            raise HarnessNotReady(f"the {self.format} agent needs a model; pass one (-i model=...)")
        if not Path(request.repo_root).is_dir():
            raise HarnessNotReady(f"repository {request.repo_root} is not a folder")

    async def run(
        self, request: HarnessRequest, **future_kwargs: Any
    ) -> AsyncIterator[HarnessEvent | HarnessResult]:
        parser = StreamParser(self.format, PARSERS[self.format], model=request.model)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv(request),
                cwd=request.repo_root,
                env=allowed_env(request.env_allowlist),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            message = f"cannot start the agent: {exc}"
            yield HarnessEvent(kind=HarnessEventKind.ERROR, text=message)
            yield HarnessResult(status=HarnessStatus.FAILED, summary=message, error=message)
            return
        pgid = proc.pid  # start_new_session: the agent leads a new process group
        # Process.wait() also waits for the pipes, which the agent's children may hold open;
        # the leader's own exit is what matters, so watch its return code.
        waiter = asyncio.ensure_future(_exited(proc))
        # The moment the agent exits, whatever it left behind in its group goes too.
        waiter.add_done_callback(lambda _: _killpg(pgid, signal.SIGKILL))
        stderr = asyncio.ensure_future(_tail(proc.stderr))
        feeder = asyncio.ensure_future(_feed(proc.stdin, request.prompt))
        loop = asyncio.get_running_loop()
        deadline = None if request.timeout is None else loop.time() + request.timeout
        timed_out = False
        try:
            lines = _Lines(proc.stdout)  # type: ignore[arg-type]
            while True:
                remaining = None if deadline is None else deadline - loop.time()
                try:
                    got = await asyncio.wait_for(lines.next(), remaining)
                except TimeoutError:
                    timed_out = True
                    break
                if got is None:
                    break
                line, complete, oversize = got
                events = (
                    [parser.oversized(line, oversize)]
                    if oversize
                    else parser.feed(line, complete=complete)
                )
                for event in events:
                    yield event
            if not timed_out:  # stdout closed; the agent may still be running
                remaining = None if deadline is None else max(0.0, deadline - loop.time())
                try:
                    await asyncio.wait_for(asyncio.shield(waiter), remaining)
                except TimeoutError:
                    timed_out = True
            if timed_out:
                await self._stop(pgid, waiter)
            exit_code = await waiter
            tail = await _bounded(stderr, "")
        finally:
            if proc.returncode is None:  # the caller stopped listening (cancelled, closed)
                _killpg(pgid, signal.SIGKILL)
            feeder.cancel()
            stderr.cancel()
            if proc.stdin is not None:
                proc.stdin.close()
            with contextlib.suppress(BaseException):  # reap it; its pipes close with the group
                await _bounded(asyncio.ensure_future(proc.wait()), None)
            waiter.cancel()
        yield self._result(parser, exit_code, tail, timed_out, request.timeout)

    async def _stop(self, pgid: int, waiter: asyncio.Future[int]) -> None:
        _killpg(pgid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.kill_grace)
        except TimeoutError:
            _killpg(pgid, signal.SIGKILL)
        await waiter
        _killpg(pgid, signal.SIGKILL)  # anything that ignored SIGTERM after its leader died

    def _result(
        self,
        parser: StreamParser,
        exit_code: int,
        stderr: str,
        timed_out: bool,
        timeout: float | None,
    ) -> HarnessResult:
        done = HarnessResult(
            status=HarnessStatus.SUCCEEDED,
            output_text=parser.output_text,
            summary=parser.final_summary,
            usage=dict(parser.usage),
            exit_code=exit_code,
            stderr=stderr,
            session_id=parser.session_id,
        )
        why = None
        if timed_out:
            why = f"the agent timed out after {timeout:g}s and was killed"
            return replace(done, status=HarnessStatus.TIMED_OUT, summary=why, error=why)
        if exit_code != 0:
            detail = first_line(stderr.splitlines()[-1]) if stderr.strip() else ""
            detail = detail or parser.failure or ""
            why = f"the agent exited with code {exit_code}" + (f": {detail}" if detail else "")
        elif parser.failure:
            why = parser.failure
        return (
            done
            if why is None
            else replace(done, status=HarnessStatus.FAILED, summary=why, error=why)
        )


async def _feed(stdin: asyncio.StreamWriter | None, prompt: str) -> None:
    if stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.write(prompt.encode("utf-8"))
        await stdin.drain()
    stdin.close()


async def _tail(stream: asyncio.StreamReader | None) -> str:
    kept = bytearray()
    if stream is None:
        return ""
    while chunk := await stream.read(65536):
        kept += chunk
        if len(kept) > STDERR_TAIL:
            del kept[: len(kept) - STDERR_TAIL]
    return kept.decode("utf-8", "replace")


async def _exited(proc: asyncio.subprocess.Process) -> int:
    while proc.returncode is None:
        await asyncio.sleep(EXIT_POLL)
    return proc.returncode


async def _bounded(task: asyncio.Future[Any], default: Any) -> Any:
    """The task's result, or ``default`` after a few seconds: the pipes close with the group,
    unless something escaped it (its own session), and then we stop waiting."""
    try:
        return await asyncio.wait_for(task, PIPE_WAIT)
    except TimeoutError:
        return default
