"""Harness kinds, registered explicitly: a name -> a factory that makes the harness."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stageline.errors import HarnessNotReady
from stageline.harnesses._chat import ChatHarness
from stageline.harnesses._command import CommandHarness
from stageline.harnesses._scripted import ScriptedHarness
from stageline.harnesses._types import Harness

__all__ = ["COMMAND_PRESETS", "HARNESSES", "make_harness", "register_harness"]

COMMAND_PRESETS: dict[str, Callable[[], CommandHarness]] = {
    "claude": CommandHarness.claude,
    "codex": CommandHarness.codex,
}
"""``command:NAME`` specs: the coding agents stageline knows how to run and parse."""


def _command(preset: str | None = None, **options: Any) -> Harness:
    if preset is None:
        if "argv" not in options:
            raise HarnessNotReady(
                "the command harness needs an agent: command:claude, command:codex, "
                "or a command line (argv) from Python"
            )
        return CommandHarness(options.pop("argv"), **options)
    if preset not in COMMAND_PRESETS:
        raise HarnessNotReady(
            f"unknown command agent {preset!r}; known: {', '.join(sorted(COMMAND_PRESETS))}"
        )
    return COMMAND_PRESETS[preset]()


def _no_preset(factory: Callable[..., Harness]) -> Callable[..., Harness]:
    def make(preset: str | None = None, **options: Any) -> Harness:
        if preset is not None:
            raise HarnessNotReady(f"harness {factory.__name__} takes no ':{preset}' variant")
        return factory(**options)

    return make


HARNESSES: dict[str, Callable[..., Harness]] = {
    "command": _command,
    "chat": _no_preset(ChatHarness),
    "scripted": _no_preset(ScriptedHarness),
}
"""Harness kind -> ``factory(preset, **options)``; a spec is ``KIND`` or ``KIND:PRESET``."""


def register_harness(kind: str, factory: Callable[..., Harness]) -> None:
    """Add a harness kind; ``factory(preset=None, **options)`` makes one."""
    HARNESSES[kind] = factory


def make_harness(spec: str, **options: Any) -> Harness:
    """The harness a spec names: ``scripted``, ``chat``, ``command:claude``, ``command:codex``."""
    kind, _, preset = spec.partition(":")
    if kind not in HARNESSES:
        raise HarnessNotReady(f"unknown harness {kind!r}; known: {', '.join(sorted(HARNESSES))}")
    return HARNESSES[kind](preset or None, **options)
