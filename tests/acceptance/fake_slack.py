"""A fake Slack Web API on loopback for the chat tests: records every call and answers like
Slack (``ok: true`` and a ``ts``), or fails the next calls when told to."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from fake_http import LoopbackJSON, wait_for


class FakeSlack:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail_next = 0
        """How many of the next calls answer ``ok: false`` (``internal_error``)."""
        self.down = False
        """Every call answers HTTP 503 while True."""
        self.slow: Any = None
        """A test of ``(method, body)``: the next call it accepts is recorded, then answered
        after ``slow_for`` seconds (past the client's timeout)."""
        self.slow_for = 12.0
        self.messages: list[dict[str, Any]] = []
        """Every message posted (channel, ts, thread_ts, metadata), as history returns them."""
        self._ts = itertools.count(1)
        self._lock = threading.Lock()
        self.server = LoopbackJSON(
            lambda path, body: self.answer(_method(path), body),
            hold=lambda path, body: self.slow_for if self.is_slow(_method(path), body) else 0.0,
        )

    @property
    def url(self) -> str:
        return f"{self.server.url}/api/"

    def answer(self, method: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if self.down:
                return 503, {"ok": False, "error": "service_unavailable"}
            if self.fail_next > 0:
                self.fail_next -= 1
                return 200, {"ok": False, "error": "internal_error"}
            self.calls.append((method, body))
            if method == "users.info":
                return 200, {"ok": True, "user": {"id": body.get("user"), "name": "bob"}}
            if method in ("conversations.history", "conversations.replies"):
                return 200, {"ok": True, "messages": self._read(method, body)}
            ts = f"{int(time.time())}.{next(self._ts):06d}"
            if method == "chat.postMessage":
                self.messages.append(
                    {
                        "channel": body.get("channel"),
                        "ts": ts,
                        "thread_ts": body.get("thread_ts"),
                        "text": body.get("text"),
                        "metadata": body.get("metadata"),
                    }
                )
            return 200, {
                "ok": True,
                "channel": body.get("channel", "C1"),
                "ts": body.get("ts") or ts,
                "message_ts": ts,
            }

    def is_slow(self, method: str, body: dict[str, Any]) -> bool:
        with self._lock:
            if self.slow is None or self.down or not self.slow(method, body):
                return False
            self.slow = None
            return True

    def _read(self, method: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        """What ``conversations.*`` returns: a channel's messages (newest first) or a thread's,
        with their metadata only when ``include_all_metadata`` is asked for."""
        channel, meta = body.get("channel"), body.get("include_all_metadata") == "true"
        if method == "conversations.history":
            found = [
                m for m in reversed(self.messages) if m["channel"] == channel and not m["thread_ts"]
            ]
        else:
            found = [
                m
                for m in self.messages
                if m["channel"] == channel and body.get("ts") in (m["ts"], m["thread_ts"])
            ]
        return [
            {k: v for k, v in m.items() if v is not None and (meta or k != "metadata")}
            for m in found
        ]

    def of(self, method: str) -> list[dict[str, Any]]:
        with self._lock:
            return [b for m, b in self.calls if m == method]

    def wait_for(self, check: Any, timeout: float = 60.0, what: str = "") -> Any:
        return wait_for(
            check,
            timeout=timeout,
            failure=lambda: f"fake Slack: no {what or check}; calls: {[m for m, _ in self.calls]}",
        )

    def close(self) -> None:
        self.server.close()


def _method(path: str) -> str:
    """The Web API method a request's path names (``/api/chat.postMessage``)."""
    return path.rsplit("/", 1)[-1]
