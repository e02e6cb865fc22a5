"""The ``chat`` harness: one LangChain chat-model call, streamed as text deltas plus usage."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from stageline.errors import HarnessNotReady
from stageline.harnesses._parsers import first_line
from stageline.harnesses._stream import estimate_cost
from stageline.harnesses._types import (
    HarnessEvent,
    HarnessEventKind,
    HarnessRequest,
    HarnessResult,
    HarnessStatus,
)

__all__ = ["ChatHarness"]


def _chunk_text(chunk: Any) -> str:
    content = getattr(chunk, "content", "")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks: keep the text ones
        return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return ""


class ChatHarness:
    """Streams a ``BaseChatModel``'s reply to the prompt; it reads and writes no files.

    Give it a model object, or let it make one from the request's model spec with LangChain's
    ``init_chat_model`` (``stageline[llm]`` and the provider's package installed).
    """

    kind = "chat"

    def __init__(
        self, model: Any = None, *, system: str | None = None, **future_kwargs: Any
    ) -> None:
        self._model = model
        self._made: dict[str, Any] = {}
        self.system = system

    def _resolve(self, request: HarnessRequest) -> Any:
        if self._model is not None:
            return self._model
        spec = request.model
        if not spec:
            raise HarnessNotReady(
                "the chat harness needs a model: a LangChain chat model object, or a model "
                "spec such as openai:gpt-4o (-i model=...)"
            )
        if spec not in self._made:
            try:
                from langchain.chat_models import init_chat_model
            except ImportError as exc:
                raise HarnessNotReady(
                    f"model {spec!r} needs LangChain: install stageline[llm] and the "
                    "provider package"
                ) from exc
            try:
                self._made[spec] = init_chat_model(spec)
            except Exception as exc:  # provider packages raise many kinds of errors
                raise HarnessNotReady(f"cannot make chat model {spec!r}: {exc}") from exc
        return self._made[spec]

    async def ensure_ready(self, request: HarnessRequest, **future_kwargs: Any) -> None:
        model = self._resolve(request)
        if not hasattr(model, "astream"):
            raise HarnessNotReady(
                f"{type(model).__name__} is not a LangChain chat model (no astream)"
            )

    async def run(
        self, request: HarnessRequest, **future_kwargs: Any
    ) -> AsyncIterator[HarnessEvent | HarnessResult]:
        model = self._resolve(request)
        messages: list[tuple[str, str]] = [("system", self.system)] if self.system else []
        messages.append(("human", request.prompt))
        parts: list[str] = []
        usage: dict[str, float] = {}
        failure: tuple[HarnessStatus, str] | None = None
        stream = model.astream(messages).__aiter__()
        loop = asyncio.get_running_loop()
        deadline = None if request.timeout is None else loop.time() + request.timeout
        try:
            while True:
                # Timed per chunk, not around the yields: the caller's time is not ours.
                remaining = None if deadline is None else deadline - loop.time()
                try:
                    chunk = await asyncio.wait_for(anext(stream), remaining)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    failure = (
                        HarnessStatus.TIMED_OUT,
                        f"the model did not finish within {request.timeout:g}s",
                    )
                    break
                except Exception as exc:  # the provider failed: a failed result, not a crash
                    why = f"{type(exc).__name__}: {first_line(str(exc))}"
                    failure = (HarnessStatus.FAILED, why)
                    break
                text = _chunk_text(chunk)
                if text:
                    parts.append(text)
                    yield HarnessEvent(kind=HarnessEventKind.TEXT_DELTA, text=text)
                _add_usage(usage, getattr(chunk, "usage_metadata", None) or {})
        finally:
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()
        text = "".join(parts)
        if text:
            yield HarnessEvent(kind=HarnessEventKind.MESSAGE, text=text)
        if usage:
            cost = estimate_cost(request.model, usage)
            if cost is not None:
                usage["cost"] = cost
            yield HarnessEvent(kind=HarnessEventKind.USAGE, data=usage)
        if failure is not None:
            yield HarnessEvent(kind=HarnessEventKind.ERROR, text=failure[1])
            yield HarnessResult(
                status=failure[0],
                output_text=text,
                summary=failure[1],
                usage=usage,
                error=failure[1],
            )
            return
        yield HarnessResult(
            status=HarnessStatus.SUCCEEDED, output_text=text, summary=first_line(text), usage=usage
        )


def _add_usage(usage: dict[str, float], metadata: Any) -> None:
    """LangChain's ``usage_metadata`` in stageline's names: its ``input_tokens`` include the
    cached ones, which ``input_token_details.cache_read`` counts."""
    for key, value in dict(metadata).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            usage[key] = usage.get(key, 0) + value
    details = dict(metadata).get("input_token_details") or {}
    cached = details.get("cache_read") if isinstance(details, dict) else None
    if isinstance(cached, int | float):
        usage["cached_input_tokens"] = usage.get("cached_input_tokens", 0) + cached
