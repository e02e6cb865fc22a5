"""Services every process that advances runs can give its stages: the ``services`` factory.

A run's services (DB handles, clients) never go into its checkpointed state, so a process that
resumes a run must make them again. ``services = "myapp.services:make"`` in ``stageline.toml``
names a callable (sync or async) returning the mapping, or a (async) context manager yielding
it, which is closed when the process is done. The CLI, the workers and the server each open it
once, through ``open_services``; services passed to a runner call add to (and override) it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import sys
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from stageline.errors import ConfigError
from stageline.runner._forge import ForgeAccess

if TYPE_CHECKING:
    from stageline.config import Settings

__all__ = ["SERVICE_FORGE", "Services", "load_factory", "open_services"]

SERVICE_FORGE = "forge"
"""The service name of ``[github]``'s settings and client (``ForgeAccess``)."""


def load_factory(spec: str, root: Any = None) -> Any:
    """The object ``module:attribute`` names; the project ``root`` is importable for it."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"services = {spec!r}: expected 'module:callable', e.g. 'myapp.services:make'"
        )
    if root is not None and str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"services = {spec!r}: cannot import {module_name!r}: {exc}") from exc
    except Exception as exc:
        raise ConfigError(
            f"services = {spec!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    found: Any = module
    for part in attr.split("."):
        if not hasattr(found, part):
            raise ConfigError(f"services = {spec!r}: {module_name!r} has no {attr!r}")
        found = getattr(found, part)
    return found


@contextlib.asynccontextmanager
async def open_services(settings: Settings) -> AsyncIterator[Mapping[str, Any]]:
    """The services ``settings.services`` makes (empty without one), closed on exit."""
    spec = getattr(settings, "services", None)
    if not spec:
        yield {}
        return
    factory = load_factory(spec, settings.root)
    async with contextlib.AsyncExitStack() as stack:
        try:
            made = factory() if callable(factory) else factory
            if inspect.isawaitable(made):
                made = await made
            if hasattr(made, "__aenter__"):
                made = await stack.enter_async_context(made)
            elif hasattr(made, "__enter__") and not isinstance(made, Mapping):
                made = stack.enter_context(made)
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(f"services = {spec!r} failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(made, Mapping):
            raise ConfigError(
                f"services = {spec!r} gave a {type(made).__name__}; "
                "it must return a mapping of service name -> object"
            )
        yield made


class Services:
    """The configured services of one runner: opened at the first advance that needs them, once,
    and closed with the runner."""

    def __init__(self, settings: Settings, *, forge: ForgeAccess | None = None) -> None:
        self.settings = settings
        self._owns_forge = forge is None
        self.forge = forge if forge is not None else ForgeAccess.configured(settings)
        """``[github]``'s settings and client (the ``forge`` service), when it is configured:
        the one given (its maker closes it), else one of its own (closed here)."""
        self._made: Mapping[str, Any] | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._lock: asyncio.Lock | None = None

    async def resolve(self, given: Mapping[str, Any] | None) -> Mapping[str, Any]:
        """The configured services, with ``given`` over them (and ``forge``, with [github])."""
        builtin: dict[str, Any] = {} if self.forge is None else {SERVICE_FORGE: self.forge}
        if not getattr(self.settings, "services", None):
            return {**builtin, **(given or {})}
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._made is None:
                stack = contextlib.AsyncExitStack()
                try:
                    made = await stack.enter_async_context(open_services(self.settings))
                except BaseException:
                    await stack.aclose()
                    raise
                self._stack, self._made = stack, made
        return {**builtin, **self._made, **(given or {})}

    async def close(self) -> None:
        """Close the configured services, if they were opened (``Runner.open`` does this)."""
        stack, self._stack, self._made = self._stack, None, None
        try:
            if stack is not None:
                await stack.aclose()
        finally:
            if self.forge is not None and self._owns_forge:
                await self.forge.aclose()
