"""Group commit: checkpoint commits that queue for the connection are committed together.

While one checkpoint's transaction holds the process's connection (on SQLite, mostly waiting
for the disk to sync its commit), the checkpoints of other runs queue behind it. The next of
them to get the connection commits every one queued so far in one transaction: one sync of the
disk and one hold of SQLite's write lock for all, instead of one each. Nobody is answered
before the commit that holds its rows, so what a caller is told stays as durable as before.

Should a group's transaction fail, its members are given back and each commits alone when it
gets the connection, so one run's bad rows never fail another run's step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stageline.ledger._executor import Op

__all__ = ["CommitGroups", "Pending"]


@dataclass(eq=False)
class Pending:
    """One caller's rows, waiting for a commit."""

    ops: Sequence[Op]
    committed: bool = False


class CommitGroups:
    """The checkpoint commits waiting for the connection, in the order they came."""

    def __init__(self) -> None:
        self._waiting: list[Pending] = []

    def join(self, ops: Sequence[Op]) -> Pending:
        """Queue ``ops`` before waiting for the connection."""
        pending = Pending(ops)
        self._waiting.append(pending)
        return pending

    def take(self, leader: Pending) -> list[Pending]:
        """``leader`` (who holds the connection) first, then everything else queued, to be
        committed at once. A member of a failed group is no longer queued: it leads the next
        group it gets the connection for."""
        group, self._waiting = self._waiting, []
        if leader in group:
            group.remove(leader)
        return [leader, *group]

    @staticmethod
    def ops(group: Sequence[Pending]) -> list[Op]:
        return [op for pending in group for op in pending.ops]

    @staticmethod
    def committed(group: Sequence[Pending]) -> None:
        for pending in group:
            pending.committed = True
