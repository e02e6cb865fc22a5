"""Dashboard sessions: sign in with an API token; an HttpOnly, SameSite=Strict cookie after.

The cookie holds only a random session id. The ledger keeps the session (a hash of its id and
of its token, see ``stageline.ledger._sessions``), so sessions outlive a restart, are shared by
every server over the database, end when idle, when too old or when their token is revoked,
and are capped per token. Every form that changes something carries the session's CSRF token
(derived from the session id, so every process knows it) in a hidden field, and a request
whose ``Origin`` (or ``Referer``) names another site is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from fastapi import HTTPException, Request

from stageline.ledger import Scope, SessionPolicy, Token, hash_token

if TYPE_CHECKING:
    from stageline.ledger import LedgerStore
    from stageline.runner import Runner

__all__ = [
    "COOKIE",
    "Notices",
    "Session",
    "SessionStore",
    "SignInRequired",
    "check_form",
    "current_session",
    "same_origin",
    "store_of",
]

COOKIE = "stageline_session"


class SignInRequired(Exception):
    """No valid session: pages redirect to the sign-in page, fragments answer 401."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


class Notices:
    """What each session is told once on its next page (kept in this process: a notice is
    made by a form post and shown by the page it redirects to)."""

    LIMIT = 10_000

    def __init__(self) -> None:
        self._by: OrderedDict[str, list[tuple[str, str]]] = OrderedDict()

    def add(self, key: str, kind: str, text: str) -> None:
        self._by.setdefault(key, []).append((kind, text))
        self._by.move_to_end(key)
        while len(self._by) > self.LIMIT:
            self._by.popitem(last=False)

    def take(self, key: str) -> list[tuple[str, str]]:
        return self._by.pop(key, [])


@dataclass
class Session:
    """A signed-in browser: its token's name and scope, and its CSRF token."""

    sid: str
    name: str
    scope: Scope
    notices: Notices

    @property
    def key(self) -> str:
        """What the ledger keeps of the session id."""
        return hash_token(self.sid)

    @property
    def csrf(self) -> str:
        return hmac.new(self.sid.encode(), b"stageline csrf", hashlib.sha256).hexdigest()

    def can(self, needed: Scope | str) -> bool:
        return self.scope.allows(needed)

    def notice(self, kind: str, text: str) -> None:
        """Say ``text`` on the next page: ``ok``, ``info`` or ``error``."""
        self.notices.add(self.key, kind, text)

    def take_notices(self) -> list[tuple[str, str]]:
        return self.notices.take(self.key)


class SessionStore:
    """Sessions in the ledger, as ``policy`` says they last; notices in this process."""

    def __init__(self, policy: SessionPolicy | None = None) -> None:
        self.policy = policy or SessionPolicy()
        self.notices = Notices()

    async def create(self, ledger: LedgerStore, token: Token) -> Session:
        sid = secrets.token_urlsafe(32)
        await ledger.start_session(hash_token(sid), token.token_hash, self.policy)
        return Session(sid=sid, name=token.name, scope=Scope(token.scope), notices=self.notices)

    async def get(self, ledger: LedgerStore, sid: str | None) -> Session | None:
        """The live session of cookie value ``sid``, its token checked again (None: none)."""
        if not sid or len(sid) > 100:
            return None
        token = await ledger.session_token(hash_token(sid), self.policy)
        if token is None:
            return None
        return Session(sid=sid, name=token.name, scope=Scope(token.scope), notices=self.notices)

    async def end(self, ledger: LedgerStore, sid: str | None) -> None:
        if sid and len(sid) <= 100:
            await ledger.end_session(hash_token(sid))
            self.notices.take(hash_token(sid))


def store_of(request: Request) -> SessionStore:
    store: SessionStore = request.app.state.sessions
    return store


async def current_session(request: Request, runner: Runner) -> Session | None:
    """The signed-in session of this request (None: signed out)."""
    return await store_of(request).get(runner.ledger, request.cookies.get(COOKIE))


def same_origin(request: Request) -> bool:
    """Whether the request comes from a page of this server (browsers send ``Origin`` on
    POST; ``Referer`` is the fallback; a request with neither is no browser's cross-site)."""
    here = request.headers.get("host", "")
    for header in ("origin", "referer"):
        value = request.headers.get(header)
        if value:
            if value == "null":
                return False
            return urlsplit(value).netloc == here
    return True


async def check_form(
    request: Request, session: Session | None, needed: Scope | str
) -> dict[str, str]:
    """The posted form, once the origin, the CSRF token and the scope are right (else 403)."""
    if not same_origin(request):
        raise HTTPException(403, "refused: this form was posted from another site")
    if session is None:
        raise SignInRequired(str(request.headers.get("referer") or "/ui/"))
    form = await request.form()
    sent = form.get("csrf")
    if not isinstance(sent, str) or not hmac.compare_digest(sent, session.csrf):
        raise HTTPException(
            403,
            "refused: the form's CSRF token is missing or wrong (reload the page and try again)",
        )
    if not session.can(needed):
        raise HTTPException(
            403,
            f"refused: your token {session.name!r} has scope {session.scope}; this needs {needed}",
        )
    return {k: v for k, v in form.items() if isinstance(v, str)}
