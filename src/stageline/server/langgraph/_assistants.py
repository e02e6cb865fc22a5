"""Assistants as a LangGraph client sees them: the built-in one of each template (its id is
the template's name) and the ones made with ``assistants.create`` (kept in the ledger).

A made assistant is a template with what its runs start with: its ``context`` (and
``config["configurable"]``, kept equal to it, as LangGraph's server does) becomes the run's
context, which a graph with a ``context_schema`` reads through its runtime.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from fastapi import HTTPException

from stageline.errors import StagelineError
from stageline.ledger import Assistant
from stageline.runner import Runner, with_context
from stageline.server.langgraph._lookup import assistant_names, known_assistant, unprocessable
from stageline.server.langgraph._mapping import iso, jsonable
from stageline.templates import list_templates

__all__ = [
    "assistant_json",
    "builtin",
    "builtins",
    "check_context",
    "find_assistant",
    "fixed",
    "new_assistant_id",
    "settings",
    "version_json",
]

_EPOCH = 0.0


def builtin(runner: Runner, name: str, origin: str) -> Assistant:
    """The built-in assistant of template ``name``: the template itself, one version."""
    description: str | None = None
    version = "1"
    try:
        made = runner.load(name)
        description, version = made.description or None, made.full_version
    except StagelineError:  # a broken template file: listed, without what it would say
        pass
    return Assistant(
        assistant_id=name,
        graph_id=name,
        name=name,
        description=description,
        metadata={"created_by": "system", "origin": origin, "template_version": version},
        created_at=_EPOCH,
        updated_at=_EPOCH,
    )


def builtins(runner: Runner) -> list[Assistant]:
    return [
        builtin(runner, i.name, i.origin) for i in list_templates(runner.settings.template_dirs)
    ]


async def find_assistant(runner: Runner, assistant_id: str) -> Assistant:
    """The assistant ``assistant_id`` names (a template's name, or a made one's id); 404."""
    for info in list_templates(runner.settings.template_dirs):
        if info.name == assistant_id:
            return builtin(runner, info.name, info.origin)
    found = await runner.ledger.assistant(assistant_id) if _is_uuid(assistant_id) else None
    if found is None:
        raise HTTPException(
            404,
            f"assistant {assistant_id[:80]!r} not found; the built-in assistants are the "
            f"templates: {', '.join(assistant_names(runner))}",
        )
    return found


def fixed(runner: Runner, assistant_id: str, doing: str) -> None:
    """409 for a built-in assistant: it is its template, changed only by changing that."""
    if assistant_id in assistant_names(runner):
        raise HTTPException(
            409,
            f"assistant {assistant_id!r} is the built-in assistant of template "
            f"{assistant_id!r}; it cannot be {doing} (create an assistant with "
            f"graph_id={assistant_id!r} to configure one)",
        )


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def new_assistant_id(runner: Runner, given: str | None) -> str:
    """The id of an assistant being made: the one given (a UUID, as LangGraph asks) or new."""
    if given is None:
        return str(uuid.uuid4())
    if not _is_uuid(given):
        raise HTTPException(422, "Invalid assistant ID: must be a UUID")
    fixed(runner, given, "replaced")
    return given


def settings(
    config: Mapping[str, Any] | None, context: Mapping[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``config`` and ``context`` kept equal as LangGraph's server keeps them: the context is
    ``config["configurable"]`` when that is given, and is copied there otherwise."""
    config = dict(config or {})
    configurable = config.get("configurable")
    if configurable and context:
        raise HTTPException(
            422,
            "give an assistant context or config.configurable, not both (context is "
            "LangGraph's replacement for configurable)",
        )
    if configurable:
        if not isinstance(configurable, Mapping):
            raise HTTPException(422, "config.configurable must be a mapping")
        return config, dict(configurable)
    if context:
        config["configurable"] = dict(context)
    return config, None if context is None else dict(context)


def check_context(runner: Runner, graph_id: str, context: Mapping[str, Any]) -> None:
    """422 unless template ``graph_id`` takes ``context`` (a graph's ``context_schema``)."""
    if context:
        with unprocessable():
            with_context(runner.load(known_assistant(runner, graph_id)), {}, context)


def assistant_json(found: Assistant) -> dict[str, Any]:
    """A LangGraph ``Assistant``."""
    return {
        "assistant_id": found.assistant_id,
        "graph_id": found.graph_id,
        "name": found.name,
        "description": found.description,
        "config": jsonable(found.config),
        "context": jsonable(found.context),
        "version": found.version,
        "metadata": jsonable(found.metadata),
        "created_at": iso(found.created_at),
        "updated_at": iso(found.updated_at),
    }


def version_json(found: Assistant) -> dict[str, Any]:
    """A LangGraph ``AssistantVersion`` (``created_at``: when the version was written)."""
    made = assistant_json(found)
    made["created_at"] = made.pop("updated_at")
    return made
