"""Dashboard sessions in the ledger, on every backend (memory, SQLite, Postgres): they end when
idle, when too old, when their token is revoked or signed out, and one token's sign-ins push out
only its own oldest sessions."""

from __future__ import annotations

import uuid

from stageline.ledger import Backend, SessionPolicy, Token, hash_token, new_token

POLICY = SessionPolicy(idle=100.0, max_age=1000.0, per_token=3, touch_every=10.0)
T0 = 1_000_000.0


async def _token(backend: Backend, scope: str = "read") -> tuple[str, Token]:
    name = f"web-{uuid.uuid4().hex[:6]}"
    secret = new_token()
    token = await backend.ledger.create_token(name, scope, hash_token(secret))
    return name, token


def _session() -> str:
    return hash_token(f"sid-{uuid.uuid4().hex}")


async def test_a_session_lasts_while_used_and_ends_when_idle_or_too_old(backend: Backend) -> None:
    ledger = backend.ledger
    name, token = await _token(backend, "decide")
    sid = _session()
    await ledger.start_session(sid, token.token_hash, POLICY, now=T0)
    found = await ledger.session_token(sid, POLICY, now=T0 + 5)
    assert found is not None and (found.name, str(found.scope)) == (name, "decide")
    # Used every 90 s (under the idle limit): it lives on, each use moving the idle clock ...
    for step in range(1, 11):
        assert await ledger.session_token(sid, POLICY, now=T0 + 90 * step) is not None
    # ... until its absolute age runs out, used or not.
    assert await ledger.session_token(sid, POLICY, now=T0 + 1001) is None
    assert not await ledger.end_session(sid)  # an ended session is gone from the ledger

    idle = _session()
    await ledger.start_session(idle, token.token_hash, POLICY, now=T0)
    assert await ledger.session_token(idle, POLICY, now=T0 + 101) is None
    assert await ledger.session_token(idle, POLICY, now=T0 + 5) is None  # gone for good


async def test_a_use_within_touch_every_is_not_written_but_still_counts_from_the_last_write(
    backend: Backend,
) -> None:
    ledger = backend.ledger
    _, token = await _token(backend)
    sid = _session()
    await ledger.start_session(sid, token.token_hash, POLICY, now=T0)
    assert await ledger.session_token(sid, POLICY, now=T0 + 9) is not None  # not written
    assert await ledger.session_token(sid, POLICY, now=T0 + 101) is None  # idle since T0


async def test_signing_out_ends_the_session_and_an_unknown_one_is_none(backend: Backend) -> None:
    ledger = backend.ledger
    _, token = await _token(backend)
    sid, other = _session(), _session()
    await ledger.start_session(sid, token.token_hash, POLICY, now=T0)
    await ledger.start_session(other, token.token_hash, POLICY, now=T0)
    assert await ledger.end_session(sid)
    assert await ledger.session_token(sid, POLICY, now=T0 + 1) is None
    assert await ledger.session_token(other, POLICY, now=T0 + 1) is not None
    assert await ledger.session_token(_session(), POLICY, now=T0 + 1) is None


async def test_revoking_a_token_ends_its_sessions_and_a_new_token_of_its_name_gets_none(
    backend: Backend,
) -> None:
    ledger = backend.ledger
    name, token = await _token(backend, "admin")
    _, bystander = await _token(backend)
    mine, theirs = _session(), _session()
    await ledger.start_session(mine, token.token_hash, POLICY, now=T0)
    await ledger.start_session(theirs, bystander.token_hash, POLICY, now=T0)
    assert await ledger.revoke_token(name)
    assert await ledger.session_token(mine, POLICY, now=T0 + 1) is None
    await ledger.create_token(name, "admin", hash_token(new_token()))  # the name again
    assert await ledger.session_token(mine, POLICY, now=T0 + 1) is None
    assert await ledger.session_token(theirs, POLICY, now=T0 + 1) is not None


async def test_sessions_are_capped_per_token_oldest_first_never_another_tokens(
    backend: Backend,
) -> None:
    ledger = backend.ledger
    _, busy = await _token(backend)
    _, quiet = await _token(backend)
    kept = _session()
    await ledger.start_session(kept, quiet.token_hash, POLICY, now=T0)
    made = []
    for i in range(POLICY.per_token + 4):
        made.append(_session())
        await ledger.start_session(made[-1], busy.token_hash, POLICY, now=T0 + i)
    live = [s for s in made if await ledger.session_token(s, POLICY, now=T0 + 20) is not None]
    assert live == made[-POLICY.per_token :]  # the newest three
    assert await ledger.session_token(kept, POLICY, now=T0 + 20) is not None


async def test_a_new_session_is_kept_though_others_began_at_the_same_instant(
    backend: Backend,
) -> None:
    ledger = backend.ledger
    _, token = await _token(backend)
    made = [_session() for _ in range(POLICY.per_token + 2)]
    for sid in made:
        await ledger.start_session(sid, token.token_hash, POLICY, now=T0)
        assert await ledger.session_token(sid, POLICY, now=T0) is not None
