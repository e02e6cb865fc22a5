"""Dashboard sessions: sign in with an API token; an HttpOnly, SameSite=Strict cookie after.

The cookie holds only a random session id; the server keeps the token (in memory, so a restart
signs everyone out) and checks it against the ledger on every request, so a revoked token ends
its sessions at once. Every form that changes something carries the session's CSRF token in a
hidden field, and a request whose ``Origin`` (or ``Referer``) names another site is refused.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from fastapi import HTTPException, Request

from stageline.ledger import Scope

if TYPE_CHECKING:
    from stageline.runner import Runner

__all__ = [
    "COOKIE",
    "Session",
    "SessionStore",
    "SignInRequired",
    "check_form",
    "current_session",
    "same_origin",
]

COOKIE = "stageline_session"
TTL = 12 * 3600.0
"""A session ends this long after sign-in."""
MAX_SESSIONS = 10_000


class SignInRequired(Exception):
    """No valid session: pages redirect to the sign-in page, fragments answer 401."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


@dataclass
class Session:
    sid: str
    secret: str
    name: str
    scope: Scope
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    created_at: float = field(default_factory=time.time)
    notices: list[tuple[str, str]] = field(default_factory=list)
    """(kind, text) shown once on the next page: ``ok``, ``info`` or ``error``."""

    def can(self, needed: Scope | str) -> bool:
        return self.scope.allows(needed)

    def notice(self, kind: str, text: str) -> None:
        self.notices.append((kind, text))

    def take_notices(self) -> list[tuple[str, str]]:
        taken, self.notices = self.notices, []
        return taken


class SessionStore:
    """Sessions by id, oldest dropped first past ``MAX_SESSIONS``."""

    def __init__(self) -> None:
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def create(self, secret: str, name: str, scope: Scope) -> Session:
        session = Session(sid=secrets.token_urlsafe(32), secret=secret, name=name, scope=scope)
        self._sessions[session.sid] = session
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return session

    def get(self, sid: str | None) -> Session | None:
        if not sid or len(sid) > 100:
            return None
        found = self._sessions.get(sid)
        if found is not None and time.time() - found.created_at > TTL:
            self.drop(sid)
            return None
        return found

    def drop(self, sid: str | None) -> None:
        if sid:
            self._sessions.pop(sid, None)


def _store(request: Request) -> SessionStore:
    store: SessionStore = request.app.state.sessions
    return store


async def current_session(request: Request, runner: Runner) -> Session | None:
    """The signed-in session of this request, its token checked again (None: signed out)."""
    store = _store(request)
    sid = request.cookies.get(COOKIE)
    session = store.get(sid)
    if session is None:
        return None
    token = await runner.ledger.authenticate(session.secret)
    if token is None or not token.active:
        store.drop(sid)
        return None
    session.name, session.scope = token.name, Scope(token.scope)
    return session


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
