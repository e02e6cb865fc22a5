"""Signing in and out: an API token typed into a password field, a session cookie after."""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import RedirectResponse, Response

from stageline.server.ui._session import COOKIE, same_origin, store_of
from stageline.server.ui._web import PREFIX, MaybeSession, render, runner_of

__all__ = ["router"]

router = APIRouter()


def _safe_next(target: str | None) -> str:
    """Only a path of the dashboard: never another site (an open redirect)."""
    if not target:
        return f"{PREFIX}/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith(f"{PREFIX}/") or "\\" in target:
        return f"{PREFIX}/"
    return target


@router.get("/login")
async def login_page(request: Request, session: MaybeSession, next: str | None = None) -> Response:
    if session is not None:
        return RedirectResponse(_safe_next(next), status_code=303)
    return render(request, "login.html", None, next=_safe_next(next), error=None)


@router.post("/login")
async def login(request: Request) -> Response:
    if not same_origin(request):
        raise HTTPException(403, "refused: this form was posted from another site")
    form = await request.form()
    secret, target = form.get("token"), form.get("next")
    target = _safe_next(target if isinstance(target, str) else None)
    token = None
    if isinstance(secret, str) and 0 < len(secret.strip()) <= 200:
        token = await runner_of(request).ledger.authenticate(secret.strip())
    if token is None or not token.active:
        return render(
            request,
            "login.html",
            None,
            next=target,
            error="That token is unknown or revoked. Make one with "
            "`stageline token create NAME --scope read|decide|admin`.",
        )
    store, ledger = store_of(request), runner_of(request).ledger
    await store.end(ledger, request.cookies.get(COOKIE))  # a session this browser had ends
    session = await store.create(ledger, token)
    answer = RedirectResponse(target, status_code=303)
    answer.set_cookie(
        COOKIE,
        session.sid,
        max_age=int(store.policy.max_age),
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return answer


@router.post("/logout")
async def logout(request: Request) -> Response:
    """End this browser's session in the ledger and forget its cookie.

    A cross-site post is refused; a same-site one ends the session whose cookie it carries
    with or without the form's CSRF token: the worst a forged sign-out can do is sign out.
    """
    if not same_origin(request):
        raise HTTPException(403, "refused: this form was posted from another site")
    await store_of(request).end(runner_of(request).ledger, request.cookies.get(COOKIE))
    answer = RedirectResponse(f"{PREFIX}/login", status_code=303)
    answer.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
    return answer
