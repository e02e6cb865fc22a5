"""The request bodies of the LangGraph-compatible API, as ``langgraph_sdk`` sends them.

Fields stageline has no use for (``config``, ``webhook``...) are accepted and ignored, so an
unchanged client works; unknown fields are ignored too, as LangGraph's server does. A run's
``context`` is what a graph with a ``context_schema`` reads through its runtime.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AssistantCreate",
    "AssistantLatest",
    "AssistantPatch",
    "AssistantSearch",
    "AssistantVersions",
    "CheckpointRef",
    "CommandBody",
    "CronCount",
    "CronCreate",
    "CronPatch",
    "CronSearch",
    "HistoryBody",
    "RunCreate",
    "RunsCancel",
    "StateAtCheckpoint",
    "ThreadCount",
    "ThreadCreate",
    "ThreadPatch",
    "ThreadPrune",
    "ThreadSearch",
    "UpdateState",
    "before_id",
]

_LOOSE = ConfigDict(extra="ignore")
_LIMIT = Field(10, ge=1, le=1000)


class AssistantSearch(BaseModel):
    model_config = _LOOSE
    metadata: dict[str, Any] | None = None
    graph_id: str | None = None
    name: str | None = None
    limit: int = _LIMIT
    offset: int = Field(0, ge=0)
    sort_by: Literal["assistant_id", "graph_id", "name", "created_at", "updated_at"] | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None


class AssistantCreate(BaseModel):
    model_config = _LOOSE
    graph_id: str = Field(min_length=1, max_length=200)
    assistant_id: str | None = Field(None, max_length=200)
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] | None = None
    name: str | None = Field(None, max_length=200)
    description: str | None = None


class AssistantPatch(BaseModel):
    model_config = _LOOSE
    graph_id: str | None = Field(None, min_length=1, max_length=200)
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    name: str | None = Field(None, max_length=200)
    description: str | None = None


class AssistantVersions(BaseModel):
    model_config = _LOOSE
    metadata: dict[str, Any] | None = None
    limit: int = _LIMIT
    offset: int = Field(0, ge=0)


class AssistantLatest(BaseModel):
    model_config = _LOOSE
    version: int = Field(ge=1)


class ThreadCreate(BaseModel):
    model_config = _LOOSE
    thread_id: str | None = None
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] | None = None


class ThreadPatch(BaseModel):
    model_config = _LOOSE
    metadata: dict[str, Any] = Field(default_factory=dict)


class ThreadSearch(BaseModel):
    model_config = _LOOSE
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    ids: list[str] | None = None
    status: Literal["idle", "busy", "interrupted", "error"] | None = None
    limit: int = _LIMIT
    offset: int = Field(0, ge=0)
    sort_by: Literal["thread_id", "status", "created_at", "updated_at"] | None = None
    sort_order: Literal["asc", "desc"] | None = None


class ThreadCount(BaseModel):
    model_config = _LOOSE
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    status: Literal["idle", "busy", "interrupted", "error"] | None = None


class ThreadPrune(BaseModel):
    model_config = _LOOSE
    thread_ids: list[str] = Field(default_factory=list)
    strategy: Literal["delete", "keep_latest"] = "delete"


class CheckpointRef(BaseModel):
    model_config = _LOOSE
    thread_id: str | None = None
    checkpoint_ns: str | None = ""
    checkpoint_id: str | None = None


class StateAtCheckpoint(BaseModel):
    model_config = _LOOSE
    checkpoint: CheckpointRef
    subgraphs: bool = False


class HistoryBody(BaseModel):
    model_config = _LOOSE
    limit: int = _LIMIT
    before: str | dict[str, Any] | None = None
    """A checkpoint id, a ``Checkpoint`` or a config (``{"configurable": {"checkpoint_id"}}``,
    as the SDK sends it)."""
    metadata: dict[str, Any] | None = None
    checkpoint: CheckpointRef | None = None


def before_id(before: str | dict[str, Any] | None) -> str | None:
    """The checkpoint id a history's ``before`` names, in any of its forms."""
    if before is None or isinstance(before, str):
        return before or None
    ref = before.get("configurable", before)
    found = ref.get("checkpoint_id") if isinstance(ref, dict) else None
    return str(found) if found else None


class UpdateState(BaseModel):
    model_config = _LOOSE
    values: dict[str, Any] | None = None
    as_node: str | None = None
    checkpoint: CheckpointRef | None = None
    checkpoint_id: str | None = None


class CommandBody(BaseModel):
    model_config = _LOOSE
    resume: Any = None
    update: Any = None
    goto: Any = None


class RunCreate(BaseModel):
    model_config = _LOOSE
    assistant_id: str = Field(min_length=1, max_length=200)
    input: dict[str, Any] | None = None
    command: CommandBody | None = None
    context: dict[str, Any] | None = None
    """The graph's runtime context; kept with the thread's run from its first run on."""
    metadata: dict[str, Any] | None = None
    stream_mode: str | list[str] = "values"
    stream_subgraphs: bool | None = None
    """Also the events of subgraphs, named ``mode|namespace``."""
    if_not_exists: Literal["create", "reject"] | None = None
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] | None = None
    strict_resume: bool | None = None
    """Refuse (409) a resume that no interrupt waits for, instead of ignoring it."""


class RunsCancel(BaseModel):
    model_config = _LOOSE
    thread_id: str | None = None
    run_ids: list[str] | None = None
    status: Literal["pending", "running", "all"] | None = None


class CronCreate(BaseModel):
    model_config = _LOOSE
    assistant_id: str = Field(min_length=1, max_length=200)
    schedule: str = Field(min_length=1, max_length=200)
    input: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    timezone: str | None = Field(None, max_length=100)
    end_time: datetime | None = None
    enabled: bool = True
    config: dict[str, Any] | None = None
    """Accepted and kept with the schedule; its runs do not use it (as with runs)."""


class CronPatch(BaseModel):
    """What ``crons.update`` changes: the fields it sends (``end_time: null`` clears it)."""

    model_config = _LOOSE
    schedule: str | None = Field(None, min_length=1, max_length=200)
    timezone: str | None = Field(None, max_length=100)
    end_time: datetime | None = None
    input: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    enabled: bool | None = None


class CronSearch(BaseModel):
    model_config = _LOOSE
    assistant_id: str | None = None
    thread_id: str | None = None
    enabled: bool | None = None
    metadata: dict[str, Any] | None = None
    limit: int = _LIMIT
    offset: int = Field(0, ge=0)
    sort_by: (
        Literal[
            "cron_id",
            "assistant_id",
            "thread_id",
            "next_run_date",
            "end_time",
            "created_at",
            "updated_at",
        ]
        | None
    ) = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None


class CronCount(BaseModel):
    model_config = _LOOSE
    assistant_id: str | None = None
    thread_id: str | None = None
    metadata: dict[str, Any] | None = None
