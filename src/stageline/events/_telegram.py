"""Telegram sink: the critical channel. A run that failed, parked, a deadline's last step or a
budget stop becomes one short plain message through the Bot API's ``sendMessage``; progress
never does (``CRITICAL_KINDS`` is all this sink ever sends, whatever its filter says).

One message per critical event, whatever the batches the events are delivered in: a deadline
that parks a run says so, then the run says it parked, in two messages, however close together
they were. A batch tried again after a failure does not send again what it already sent.

The bot token is part of the request path (``{api_url}/bot{token}/sendMessage``): it is kept
out of the sink's name and every error, masked in events, and masked in httpx's own request
log lines by a filter on its loggers.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from stageline.events._delivery import DeliveryError
from stageline.events._redact import Redactor, mask_url
from stageline.events._webhook import new_client, post
from stageline.ledger.records import Event

if TYPE_CHECKING:  # httpx is imported on first delivery
    import httpx

    from stageline.ledger import LedgerStore

__all__ = ["CRITICAL_KINDS", "DEFAULT_API_URL", "TelegramSink", "telegram_text"]

DEFAULT_API_URL = "https://api.telegram.org"
CRITICAL_KINDS = (
    "run.failed",
    "run.parked",
    "gate.expired",
    "question.expired",
    "interrupt.expired",
    "budget.exceeded",
)
"""What a Telegram sink sends: a run failed or parked, a deadline's last step was applied
(``*.expired``), a run stopped at its budget gate. A table's ``kinds`` may narrow these only."""
TEXT_LIMIT = 4096
"""Characters in one Telegram message."""
_DETAIL = 600
DASHBOARD_RUNS = "/ui/runs/"
"""Where a run's dashboard page is under ``public_url`` (``stageline serve``'s ``/ui``)."""

_HEADLINES = {
    "run.failed": ("❌", "failed"),
    "run.parked": ("🅿️", "parked"),
    "budget.exceeded": ("💸", "stopped at its budget"),
}


class _MaskSecrets(logging.Filter):
    """Masks the bot tokens it knows in records of httpx's loggers (its request lines show
    the URL, and a Telegram URL holds the token)."""

    def __init__(self) -> None:
        super().__init__()
        self.redactor = Redactor()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = self.redactor.text(message)
        if masked is not message:
            record.msg, record.args = masked, ()
        return True


_LOG_MASK = _MaskSecrets()


def _mask_in_http_logs(*secrets: str) -> None:
    """Mask ``secrets`` in httpx's and httpcore's log records from now on (the filter is
    installed by the first Telegram sink, once)."""
    _LOG_MASK.redactor.add(*secrets)
    for name in ("httpx", "httpcore"):
        logger = logging.getLogger(name)
        if _LOG_MASK not in logger.filters:
            logger.addFilter(_LOG_MASK)


def run_page(public_url: str, run_id: str) -> str:
    """The run's dashboard page."""
    return f"{public_url.rstrip('/')}{DASHBOARD_RUNS}{quote(run_id, safe='')}"


def _clip(text: str, limit: int = _DETAIL) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _line(event: Event, template: str | None) -> str:
    icon, said = _HEADLINES.get(event.kind, ("•", event.kind))
    if event.kind.endswith(".expired"):
        icon, said = "⏰", "deadline passed"
    run = f"Run {event.run_id}" + (f" ({template})" if template else "")
    where = f" at {event.node}" if event.node else ""
    line = f"{icon} {run} {said}{where}"
    phase = event.data.get("failure_phase")
    if event.kind == "run.failed" and isinstance(phase, str) and phase:
        line += f" [{phase}]"
    return line + (f": {_clip(event.message)}" if event.message else "")


def telegram_text(
    event: Event, *, template: str | None = None, public_url: str | None = None
) -> str:
    """One plain message for one critical event: what happened, then the run's page."""
    lines = [_line(event, template)]
    if public_url:
        lines.append(run_page(public_url, event.run_id))
    text = "\n".join(lines)
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 1] + "…"


class TelegramSink:
    """Sends each run's critical events to one Telegram chat; ``name`` shows no token."""

    def __init__(
        self,
        *,
        bot_token: str,
        chat_id: int | str,
        api_url: str = DEFAULT_API_URL,
        public_url: str | None = None,
        ledger: LedgerStore | None = None,
        timeout: float = 5.0,
        name: str | None = None,
        client: httpx.AsyncClient | None = None,
        **future_kwargs: Any,
    ) -> None:
        if not api_url.startswith(("http://", "https://")):
            raise ValueError("api_url must start with http:// or https://")
        if not bot_token or "/" in bot_token or any(c.isspace() for c in bot_token):
            raise ValueError("the bot token is empty or not a token (it has / or spaces)")
        self._url = f"{api_url.rstrip('/')}/bot{bot_token}/sendMessage"
        self.chat_id = chat_id
        self.public_url = public_url.rstrip("/") if public_url else None
        self._ledger = ledger
        self._timeout = timeout
        self._client = client
        self._own_client = client is None
        self._templates: dict[str, str | None] = {}
        self._sent: OrderedDict[tuple[str, int], None] = OrderedDict()
        """The recent events (run, seq) already sent: a batch tried again skips them."""
        self.name = name or f"telegram:{mask_url(api_url)}"
        self.secrets: tuple[str, ...] = (bot_token,)
        """What the bus masks in events and httpx's log lines."""
        _mask_in_http_logs(*self.secrets)

    def __repr__(self) -> str:
        return f"TelegramSink({self.name!r})"

    async def _template(self, run_id: str) -> str | None:
        if run_id not in self._templates and self._ledger is not None:
            try:
                self._templates[run_id] = (await self._ledger.get_run(run_id)).template
            except Exception:  # a run pruned meanwhile: the message names the run only
                self._templates[run_id] = None
            if len(self._templates) > 1000:
                self._templates.pop(next(iter(self._templates)))
        return self._templates.get(run_id)

    def payload(self, text: str) -> dict[str, Any]:
        preview = {"is_disabled": True}  # a preview's GET of the dashboard shows only sign-in
        return {"chat_id": self.chat_id, "text": text, "link_preview_options": preview}

    async def deliver(self, events: Sequence[Event], **future_kwargs: Any) -> None:
        if self._client is None:
            self._client = new_client(self._timeout)
        for event in events:
            key = (event.run_id, event.seq)
            if event.kind not in CRITICAL_KINDS or key in self._sent:
                continue
            text = telegram_text(
                event, template=await self._template(event.run_id), public_url=self.public_url
            )
            response = await post(self._client, self._url, json=self.payload(text))
            if response.status_code >= 300:
                raise _api_error(response)
            if event.seq:  # written to the ledger: it has a place of its own
                self._sent[key] = None
                if len(self._sent) > 1000:
                    self._sent.popitem(last=False)

    async def aclose(self, **future_kwargs: Any) -> None:
        client, self._client = self._client, None
        if client is not None and self._own_client:
            await client.aclose()


def _api_error(response: httpx.Response) -> DeliveryError:
    """Telegram's answer as a ``DeliveryError``: 429 waits ``parameters.retry_after`` s, 5xx
    retries, any other 4xx (a wrong chat, a revoked token) is given up."""
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    found = body.get("parameters")
    params: dict[str, Any] = found if isinstance(found, dict) else {}
    retry_after = params.get("retry_after") or response.headers.get("Retry-After")
    try:
        wait = float(retry_after) if retry_after is not None else None
    except (TypeError, ValueError):
        wait = None
    said = body.get("description")
    reason = f"HTTP {status}" + (f": {_clip(_LOG_MASK.redactor.text(said), 200)}" if said else "")
    if params.get("migrate_to_chat_id"):
        reason += f" (the chat is now {params['migrate_to_chat_id']}: set chat_id to it)"
    retryable = status in (408, 425, 429) or status >= 500
    return DeliveryError(reason, retryable=retryable, retry_after=wait)
