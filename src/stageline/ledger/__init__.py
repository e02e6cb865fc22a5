"""The run ledger: runs, node records and events, with the checkpoints of their runs."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from stageline.ledger._backend import Backend, mask_url, open_backend
from stageline.ledger._base import LedgerStore, Publisher, holder_is_dead, this_holder
from stageline.ledger._human import (
    INBOX_TYPES,
    Effect,
    EffectStatus,
    SettleRound,
    Wait,
    WaitChanges,
    WaitKind,
    WaitStatus,
    already_decided,
)
from stageline.ledger._reader import open_ledger
from stageline.ledger.records import (
    Claimed,
    Event,
    EventCategory,
    NodeRecord,
    NodeStatus,
    Run,
    RunClaim,
    RunStatus,
)

if TYPE_CHECKING:
    from stageline.ledger._admin import (
        CopyReport,
        Reclaimed,
        UpgradeReport,
        copy_database,
        reclaim_space,
        upgrade_database,
    )
    from stageline.ledger._assistants import Assistant, AssistantNotFound
    from stageline.ledger._crons import Cron, check_schedule, next_due
    from stageline.ledger._lineage import Lineage
    from stageline.ledger._outbox import Claim, SinkStart
    from stageline.ledger._outcome_stats import OutcomeGroup, group_outcomes
    from stageline.ledger._outcomes import Outcome
    from stageline.ledger._search import RunPage, RunQuery
    from stageline.ledger._sessions import SessionPolicy
    from stageline.ledger._sqlite import MemoryLedger, commit_off_the_loop
    from stageline.ledger._sqlite_read import read_runs
    from stageline.ledger._store import open_store
    from stageline.ledger._threads import ApiRun, ApiRunStatus, ThreadMeta
    from stageline.ledger._tokens import Scope, Token, hash_token, new_token

# Imported on first use: these pull in LangGraph (or SQLAlchemy), which the command line's read
# commands never need.
_LAZY = {
    "CopyReport": "stageline.ledger._admin",
    "Reclaimed": "stageline.ledger._admin",
    "reclaim_space": "stageline.ledger._admin",
    "UpgradeReport": "stageline.ledger._admin",
    "copy_database": "stageline.ledger._admin",
    "upgrade_database": "stageline.ledger._admin",
    "MemoryLedger": "stageline.ledger._sqlite",
    "commit_off_the_loop": "stageline.ledger._sqlite",
    "read_runs": "stageline.ledger._sqlite_read",
    "open_store": "stageline.ledger._store",
    "Outcome": "stageline.ledger._outcomes",
    "Lineage": "stageline.ledger._lineage",
    "Assistant": "stageline.ledger._assistants",
    "AssistantNotFound": "stageline.ledger._assistants",
    "Cron": "stageline.ledger._crons",
    "check_schedule": "stageline.ledger._crons",
    "next_due": "stageline.ledger._crons",
    "RunPage": "stageline.ledger._search",
    "ApiRun": "stageline.ledger._threads",
    "ApiRunStatus": "stageline.ledger._threads",
    "ThreadMeta": "stageline.ledger._threads",
    "RunQuery": "stageline.ledger._search",
    "SessionPolicy": "stageline.ledger._sessions",
    "Scope": "stageline.ledger._tokens",
    "Token": "stageline.ledger._tokens",
    "hash_token": "stageline.ledger._tokens",
    "new_token": "stageline.ledger._tokens",
    "Claim": "stageline.ledger._outbox",
    "SinkStart": "stageline.ledger._outbox",
    "OutcomeGroup": "stageline.ledger._outcome_stats",
    "group_outcomes": "stageline.ledger._outcome_stats",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stageline.ledger' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "INBOX_TYPES",
    "ApiRun",
    "ApiRunStatus",
    "Assistant",
    "AssistantNotFound",
    "Backend",
    "Claim",
    "Claimed",
    "CopyReport",
    "Cron",
    "Effect",
    "EffectStatus",
    "Event",
    "EventCategory",
    "LedgerStore",
    "Lineage",
    "MemoryLedger",
    "NodeRecord",
    "NodeStatus",
    "Outcome",
    "OutcomeGroup",
    "Publisher",
    "Reclaimed",
    "Run",
    "RunClaim",
    "RunPage",
    "RunQuery",
    "RunStatus",
    "Scope",
    "SessionPolicy",
    "SettleRound",
    "SinkStart",
    "ThreadMeta",
    "Token",
    "UpgradeReport",
    "Wait",
    "WaitChanges",
    "WaitKind",
    "WaitStatus",
    "already_decided",
    "check_schedule",
    "commit_off_the_loop",
    "copy_database",
    "group_outcomes",
    "hash_token",
    "holder_is_dead",
    "mask_url",
    "new_token",
    "next_due",
    "open_backend",
    "open_ledger",
    "open_store",
    "read_runs",
    "reclaim_space",
    "this_holder",
    "upgrade_database",
]
