"""Webhook sink: Discord, Slack, or generic JSON signed with HMAC-SHA256, over httpx.

The generic JSON body is signed as Stripe and GitHub do: the receiver recomputes
``HMAC-SHA256(secret, f"{timestamp}.{body}")`` and compares it with the
``X-Stageline-Signature: sha256=<hex>`` header, and refuses an old ``X-Stageline-Timestamp``
(``verify_signature`` does both). ``X-Stageline-Delivery`` names the batch and stays the same
across retries, so a receiver can drop duplicates.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stageline.events._delivery import DeliveryError
from stageline.events._formats import FORMATS, discord_payloads, json_payload, slack_payloads
from stageline.events._redact import mask_url
from stageline.ledger.records import Event

if TYPE_CHECKING:  # httpx is imported on first delivery: a run without webhooks never pays
    import httpx

    from stageline.events._links import DecisionLinks

__all__ = [
    "DELIVERY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "WebhookSink",
    "sign_payload",
    "verify_signature",
]

SIGNATURE_HEADER = "X-Stageline-Signature"
TIMESTAMP_HEADER = "X-Stageline-Timestamp"
DELIVERY_HEADER = "X-Stageline-Delivery"
_USER_AGENT = "stageline-webhook/1"


def sign_payload(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``: ``sha256=<hex>``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify_signature(
    secret: str,
    *,
    body: bytes,
    timestamp: str,
    signature: str,
    tolerance: float = 300.0,
    now: float | None = None,
) -> bool:
    """True when ``signature`` signs ``body`` at ``timestamp`` no older than ``tolerance`` s."""
    try:
        sent = float(timestamp)
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - sent) > tolerance:
        return False
    return hmac.compare_digest(sign_payload(secret, timestamp, body), signature)


class WebhookSink:
    """Posts batches of events to one webhook; its ``name`` shows the host only."""

    def __init__(
        self,
        *,
        url: str,
        format: str = "json",
        secret: str | None = None,
        timeout: float = 5.0,
        name: str | None = None,
        username: str = "stageline",
        client: httpx.AsyncClient | None = None,
        links: DecisionLinks | None = None,
        **future_kwargs: Any,
    ) -> None:
        if format not in FORMATS:
            raise ValueError(f"unknown webhook format {format!r}; use one of {', '.join(FORMATS)}")
        if not url.startswith(("http://", "https://")):
            raise ValueError("a webhook url must start with http:// or https://")
        self._url = url
        self.format = format
        self._secret = secret or None
        self._timeout = timeout
        self._username = username
        self._client = client
        self._own_client = client is None
        self._links = links if format != "slack" else None
        """Signed decision links for ``gate.waiting`` events (Discord and JSON; when the
        configuration has a ``public_url``)."""
        self.name = name or f"{format}:{mask_url(url)}"
        path = url.split("://", 1)[1].partition("/")[2]
        self.secrets: tuple[str, ...] = tuple(
            s for s in (secret, url, path if format != "json" else None) if s
        )
        """What the bus masks in events: the signing secret and the URL (Discord's and Slack's
        URLs are credentials in themselves)."""

    def __repr__(self) -> str:
        return f"WebhookSink({self.name!r})"

    def payloads(
        self, events: Sequence[Event], links: Mapping[int, Mapping[str, str]] | None = None
    ) -> list[dict[str, Any]]:
        if self.format == "discord":
            return discord_payloads(events, username=self._username, links=links)
        if self.format == "slack":
            return slack_payloads(events)
        return [json_payload(events, links=links)]

    def request(self, payload: dict[str, Any], delivery: str) -> tuple[bytes, dict[str, str]]:
        """The body and headers of one POST; signed when the sink has a secret."""
        body = json.dumps(payload, default=str, separators=(",", ":"), ensure_ascii=False).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": _USER_AGENT,
            DELIVERY_HEADER: delivery,
        }
        if self._secret:
            stamp = str(int(time.time()))
            headers[TIMESTAMP_HEADER] = stamp
            headers[SIGNATURE_HEADER] = sign_payload(self._secret, stamp, body)
        return body, headers

    async def deliver(self, events: Sequence[Event], **future_kwargs: Any) -> None:
        if self._client is None:
            self._client = new_client(self._timeout)
        links = None
        if self._links is not None:
            links = {
                e.seq: made
                for e in events
                if e.kind == "gate.waiting" and (made := await self._links.for_event(e))
            }
        payloads = self.payloads(events, links)
        batch = _delivery_id(events)
        for number, payload in enumerate(payloads):
            body, headers = self.request(
                payload, batch if len(payloads) == 1 else f"{batch}-{number}"
            )
            response = await post(self._client, self._url, content=body, headers=headers)
            if response.status_code >= 300:
                raise _status_error(response)

    async def aclose(self, **future_kwargs: Any) -> None:
        client, self._client = self._client, None
        if client is not None and self._own_client:
            await client.aclose()


def new_client(timeout: float) -> httpx.AsyncClient:
    """An HTTP client for one sink: ``timeout`` s per request (2 s at most to connect), no
    redirects (a redirect could carry a credential somewhere else)."""
    import httpx

    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout, connect=min(timeout, 2.0)), follow_redirects=False
    )


async def post(client: httpx.AsyncClient, url: str, **request: Any) -> httpx.Response:
    """POST ``url``; a transport failure is a retryable ``DeliveryError`` naming its type only
    (an httpx message holds the URL, and a sink's URL may be a credential)."""
    import httpx

    try:
        return await client.post(url, **request)
    except httpx.TimeoutException as exc:
        raise DeliveryError(f"timed out ({type(exc).__name__})") from None
    except httpx.HTTPError as exc:
        raise DeliveryError(type(exc).__name__) from None


def _status_error(response: httpx.Response) -> DeliveryError:
    status = response.status_code
    retry_after = None
    raw = response.headers.get("Retry-After")
    if raw:
        try:
            retry_after = float(raw)
        except ValueError:
            retry_after = None
    retryable = status in (408, 425, 429) or status >= 500
    return DeliveryError(f"HTTP {status}", retryable=retryable, retry_after=retry_after)


def _delivery_id(events: Sequence[Event]) -> str:
    """Stable for one batch across retries: a digest of its events' (run, seq)."""
    key = ",".join(f"{e.run_id}:{e.seq}" for e in events)
    return hashlib.sha256(key.encode()).hexdigest()[:24]
