"""Signed one-time decision links: a gate decided from a channel that has no buttons.

A link is ``{public_url}/links/{token}``; the token is the claim (run, node, visit, attempt,
state hash, decision, expiry) in URL-safe base64, a dot, and an HMAC-SHA256 of it keyed by a
secret the server keeps in the ledger (made at random on first use, so every process over the
same database signs and checks alike; it is never configured, logged or sent). Opening a link
only shows a confirmation page; confirming decides once (see ``stageline.server.chat``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stageline.ledger import WaitKind

if TYPE_CHECKING:
    from stageline.ledger import LedgerStore, Wait
    from stageline.ledger.records import Event

__all__ = ["LINK_DECISIONS", "LINK_TTL", "DecisionLinks", "LinkClaim", "LinkRefused"]

LINK_SECRET = "decision_links"
"""The name of the ledger secret links are signed with."""
LINK_TTL = 7 * 24 * 3600.0
"""How long a link lives when its gate has no deadline (seconds)."""
LINK_DECISIONS = ("approve", "reject", "changes", "takeover")


class LinkRefused(Exception):
    """A link that cannot decide anything: ``reason`` is what the page says."""

    def __init__(self, reason: str, *, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass(frozen=True, kw_only=True)
class LinkClaim:
    """What a link says it decides."""

    run_id: str
    node: str
    gate: str
    wait_id: str
    attempt: int
    state_hash: str
    decision: str
    expires_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "r": self.run_id,
            "n": self.node,
            "g": self.gate,
            "w": self.wait_id,
            "a": self.attempt,
            "h": self.state_hash,
            "d": self.decision,
            "e": int(self.expires_at),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LinkClaim:
        return cls(
            run_id=str(data["r"]),
            node=str(data["n"]),
            gate=str(data["g"]),
            wait_id=str(data["w"]),
            attempt=int(data["a"]),
            state_hash=str(data["h"]),
            decision=str(data["d"]),
            expires_at=float(data["e"]),
        )


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class DecisionLinks:
    """Makes and checks decision links for the gates of one ledger."""

    def __init__(self, public_url: str, ledger: LedgerStore, *, ttl: float = LINK_TTL) -> None:
        self.public_url = public_url.rstrip("/")
        self.ledger = ledger
        self.ttl = ttl
        self._key: bytes | None = None

    async def _secret(self) -> bytes:
        if self._key is None:
            self._key = (await self.ledger.chat_secret(LINK_SECRET)).encode()
        return self._key

    async def sign(self, claim: LinkClaim) -> str:
        body = _b64(json.dumps(claim.to_json(), separators=(",", ":"), sort_keys=True).encode())
        mac = hmac.new(await self._secret(), body.encode(), hashlib.sha256).digest()
        return f"{body}.{_b64(mac)}"

    async def for_wait(self, wait: Wait) -> dict[str, str]:
        """A link per decision the gate takes (changes only where it takes changes, takeover
        only at a park gate)."""
        if wait.kind is not WaitKind.GATE:
            return {}
        expires = wait.deadline_at or (wait.requested_at + self.ttl)
        out = {}
        for decision in LINK_DECISIONS:
            if decision == "changes" and wait.payload.get("changes_to") is None:
                continue
            if decision == "takeover" and not wait.payload.get("park"):
                continue
            claim = LinkClaim(
                run_id=wait.run_id,
                node=wait.node,
                gate=wait.name,
                wait_id=wait.wait_id,
                attempt=wait.attempt,
                state_hash=wait.state_hash or "",
                decision=decision,
                expires_at=expires,
            )
            out[decision] = f"{self.public_url}/links/{await self.sign(claim)}"
        return out

    async def for_event(self, event: Event) -> dict[str, str]:
        """The links of the gate a ``gate.waiting`` event is about ({} for any other event)."""
        if event.kind != "gate.waiting":
            return {}
        wait = await find_wait(self.ledger, event)
        return await self.for_wait(wait) if wait is not None else {}

    async def check(self, token: str, *, now: float | None = None) -> LinkClaim:
        """The claim of a genuine, unexpired link; ``LinkRefused`` saying why not otherwise."""
        body, _, mac = token.partition(".")
        try:
            given = _unb64(mac)
            data = json.loads(_unb64(body))
            claim = LinkClaim.from_json(data)
        except (ValueError, KeyError, TypeError):
            raise LinkRefused(
                "this link is not a stageline decision link (it is cut short or was changed)"
            ) from None
        wanted = hmac.new(await self._secret(), body.encode(), hashlib.sha256).digest()
        if not hmac.compare_digest(wanted, given):
            raise LinkRefused(
                "this link's signature does not match: it was changed, or it was "
                "not made by this server",
                status=403,
            )
        if claim.decision not in LINK_DECISIONS:
            raise LinkRefused("this link names no decision")
        if claim.expires_at < (time.time() if now is None else now):
            raise LinkRefused(
                "this link has expired; decide with `stageline approve` or ask for a new link",
                status=410,
            )
        return claim

    async def use(self, token: str) -> bool:
        """Mark the link used: True the first time only (the ledger decides)."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        return await self.ledger.chat_once(f"link:{digest}")


async def find_wait(ledger: LedgerStore, event: Event) -> Wait | None:
    """The wait a ``gate.waiting`` or ``question.asked`` event announced."""
    wait_id = event.data.get("wait_id") or event.data.get("question_id")
    waits = [w for w in await ledger.waits(event.run_id) if w.node == event.node]
    if wait_id:
        waits = [w for w in waits if w.wait_id == wait_id]
    else:
        waits = [
            w
            for w in waits
            if w.attempt == event.data.get("attempt")
            and w.state_hash == event.data.get("state_hash")
        ]
    if not waits:
        return None
    return max(waits, key=lambda w: (w.requested_at, w.round))
