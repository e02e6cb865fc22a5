"""One small chat-model interface: an offline deterministic generator, or a LangChain model."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from stageline.errors import ConfigError

__all__ = ["ChatModel", "Completion", "LangChainModel", "OfflineModel", "chat_model"]


@dataclass(frozen=True, kw_only=True)
class Completion:
    """One model call's text and what it cost."""

    text: str
    model: str
    input_tokens: int
    output_tokens: int
    latency: float


class ChatModel(Protocol):
    """What stages call; ``name`` says which model answered."""

    name: str

    async def complete(self, prompt: str, *, system: str | None = None) -> Completion: ...


def _count_tokens(text: str) -> int:
    # Roughly a token per four characters; only the offline model uses it.
    return max(1, len(text) // 4)


class OfflineModel:
    """A deterministic writer for running offline: sentences built from the prompt's subject
    and sections (see ``_offline``); its text says plainly that no model wrote it."""

    name = "offline"

    async def complete(self, prompt: str, *, system: str | None = None) -> Completion:
        from stageline.llm._offline import offline_text

        started = time.perf_counter()
        text = offline_text(prompt)
        return Completion(
            text=text,
            model=self.name,
            input_tokens=_count_tokens((system or "") + prompt),
            output_tokens=_count_tokens(text),
            latency=time.perf_counter() - started,
        )


class LangChainModel:
    """A LangChain chat model made by ``init_chat_model(spec)``."""

    def __init__(self, spec: str, model: Any) -> None:
        self.name = spec
        self._model = model

    async def complete(self, prompt: str, *, system: str | None = None) -> Completion:
        started = time.perf_counter()
        messages: list[tuple[str, str]] = []
        if system:
            messages.append(("system", system))
        messages.append(("human", prompt))
        reply = await self._model.ainvoke(messages)
        usage = getattr(reply, "usage_metadata", None) or {}
        text = reply.content if isinstance(reply.content, str) else str(reply.content)
        return Completion(
            text=text,
            model=self.name,
            input_tokens=int(usage.get("input_tokens", 0)),
            output_tokens=int(usage.get("output_tokens", 0)),
            latency=time.perf_counter() - started,
        )


def chat_model(spec: str | None) -> ChatModel:
    """The model named by configuration: None or ``offline`` gives the offline generator."""
    if not spec or spec == "offline":
        return OfflineModel()
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as exc:
        raise ConfigError(
            f"model {spec!r} is configured but LangChain is not installed; "
            "install stageline[llm] and the provider package (e.g. langchain-openai)"
        ) from exc
    try:
        return LangChainModel(spec, init_chat_model(spec))
    except Exception as exc:  # provider packages raise many kinds of errors
        raise ConfigError(f"cannot make chat model {spec!r}: {exc}") from exc
