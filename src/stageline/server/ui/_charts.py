"""Charts as inline SVG drawn on the server: a run's timeline, lines over time, bars."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

from stageline.ledger import Event, NodeRecord

__all__ = ["Series", "bar_chart", "fmt_seconds", "line_chart", "timeline"]

PALETTE = ("#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2", "#65a30d")


def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 0.01:
        return f"{value * 1000:.2g} ms"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def _text(x: float, y: float, text: str, cls: str = "axis", anchor: str = "start") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" class="{cls}" text-anchor="{anchor}">{escape(text)}</text>'
    )


def timeline(
    records: Sequence[NodeRecord],
    events: Sequence[Event],
    *,
    start: float,
    end: float | None,
    width: int = 760,
) -> Markup:
    """A Gantt bar per node attempt (retries marked ``try N``, attempts ``a N``), and a
    dashed line where the run went on again (resumed after a person, or retried)."""
    if not records:
        return Markup('<p class="muted">No node has run yet.</p>')
    end = end or max([time.time(), *(r.finished_at or r.started_at for r in records)])
    span = max(end - start, 1e-3)
    label_w, row_h, top = 170.0, 22.0, 22.0
    plot = width - label_w - 60
    ordered = sorted(records, key=lambda r: (r.started_at, r.attempt, r.try_no))
    height = top + row_h * len(ordered) + 10

    def x(t: float) -> float:
        return label_w + max(0.0, min(1.0, (t - start) / span)) * plot

    parts = [
        f'<line x1="{label_w}" x2="{label_w + plot}" y1="{top - 6}" y2="{top - 6}" '
        f'class="gridline"/>',
        _text(label_w, top - 10, "0"),
        _text(label_w + plot, top - 10, fmt_seconds(span), anchor="end"),
    ]
    for e in events:
        if e.kind not in ("run.resumed", "run.retried"):
            continue
        word = "retried" if e.kind == "run.retried" else "resumed"
        parts.append(
            f'<line x1="{x(e.ts):.1f}" x2="{x(e.ts):.1f}" y1="{top - 6}" '
            f'y2="{height - 6}" class="restart {word}" data-restart="{word}">'
            f"<title>run {word} (attempt {escape(str(e.data.get('attempt', '?')))})</title></line>"
        )
    for i, r in enumerate(ordered):
        y = top + i * row_h
        open_ = r.status.value in ("running", "waiting")
        stop = end if open_ else (r.finished_at or r.started_at)
        x1, x2 = x(r.started_at), x(stop)
        tags = []
        if r.attempt > 1:
            tags.append(f"a{r.attempt}")
        if r.try_no > 1:
            tags.append(f"try {r.try_no}")
        name = r.node + (f" ({', '.join(tags)})" if tags else "")
        tip = (
            f"{r.node}: {r.status} · attempt {r.attempt}, try {r.try_no} · "
            f"{fmt_seconds(r.duration)}" + (f" · {r.error}" if r.error else "")
        )
        parts.append(
            f'<g class="bar st-{escape(r.status)}" data-bar-node="{escape(r.node)}" '
            f'data-bar-status="{escape(r.status)}"'
            f' data-try="{r.try_no}" data-attempt="{r.attempt}"><title>{escape(tip)}</title>'
            + _text(label_w - 8, y + 14, name, "bar-label", "end")
            + f'<rect x="{x1:.1f}" y="{y + 3:.1f}" width="{max(x2 - x1, 3):.1f}" '
            f'height="{row_h - 6}" rx="3"/>'
            + _text(
                max(x2, x1 + 3) + 5,
                y + 14,
                str(r.status) if open_ else fmt_seconds(r.duration),
                "bar-value",
            )
            + "</g>"
        )
    return Markup(
        f'<svg class="chart timeline" viewBox="0 0 {width} {height:.0f}" '
        f'width="{width}" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>'
    )


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]
    """(x, y), x as epoch seconds."""


def line_chart(
    series: Sequence[Series],
    *,
    unit: str = "s",
    width: int = 520,
    height: int = 150,
    title: str = "",
) -> Markup:
    """Lines over time, with a y axis from 0 and a legend."""
    pts = [p for s in series for p in s.points]
    if not pts:
        return Markup('<p class="muted">No data yet.</p>')
    left, right, top, bottom = 54.0, 12.0, 14.0, 26.0
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y1 = max(p[1] for p in pts) or 1.0
    pw, ph = width - left - right, height - top - bottom

    def px(v: float) -> float:
        return left + (0.5 if x1 == x0 else (v - x0) / (x1 - x0)) * pw

    def py(v: float) -> float:
        return top + ph - v / y1 * ph

    fmt = fmt_seconds if unit == "s" else (lambda v: f"{v:,.4g}")
    parts = []
    for frac in (0.0, 0.5, 1.0):
        y = py(y1 * frac)
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" '
            f'class="gridline"/>' + _text(left - 6, y + 4, fmt(y1 * frac), anchor="end")
        )
    day = time.strftime("%m-%d %H:%M", time.localtime(x0))
    parts.append(_text(left, height - 6, day))
    if x1 != x0:
        parts.append(
            _text(
                width - right,
                height - 6,
                time.strftime("%m-%d %H:%M", time.localtime(x1)),
                anchor="end",
            )
        )
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        path = " ".join(
            f"{'M' if j == 0 else 'L'}{px(a):.1f},{py(b):.1f}" for j, (a, b) in enumerate(s.points)
        )
        parts.append(
            f'<path d="{path}" fill="none" stroke="{color}" stroke-width="2" '
            f'data-series="{escape(s.name)}"/>'
        )
        parts += [
            f'<circle cx="{px(a):.1f}" cy="{py(b):.1f}" r="2.5" fill="{color}">'
            f"<title>{escape(s.name)}: {escape(fmt(b))}</title></circle>"
            for a, b in s.points
        ]
        parts.append(
            f'<rect x="{left + 8 + i * 90}" y="2" width="10" height="4" '
            f'fill="{color}"/>' + _text(left + 22 + i * 90, 8, s.name, "legend")
        )
    return Markup(
        f'<svg class="chart" role="img" aria-label="{escape(title)}" '
        f'viewBox="0 0 {width} {height}" width="{width}" '
        f'xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>'
    )


def bar_chart(
    values: Mapping[str, float],
    *,
    unit: str = "",
    width: int = 520,
    title: str = "",
    percent: bool = False,
) -> Markup:
    """Horizontal bars, one per key, with the value at the end."""
    if not values:
        return Markup('<p class="muted">No data yet.</p>')
    label_w, row_h = 150.0, 22.0
    top = max(values.values()) or 1.0
    plot = width - label_w - 70
    height = row_h * len(values) + 4
    parts = []
    for i, (key, value) in enumerate(values.items()):
        y = i * row_h
        w = max(value / top * plot, 1.5)
        shown = f"{value:.0%}" if percent else f"{value:,.4g}{unit}"
        parts.append(
            f'<g data-bar="{escape(key)}" data-value="{value:.6g}">'
            f"<title>{escape(key)}: {escape(shown)}</title>"
            + _text(label_w - 8, y + 15, key, "bar-label", "end")
            + f'<rect x="{label_w}" y="{y + 4}" width="{w:.1f}" height="{row_h - 8}" '
            f'rx="3" fill="{PALETTE[i % len(PALETTE)]}"/>'
            + _text(label_w + w + 6, y + 15, shown, "bar-value")
            + "</g>"
        )
    return Markup(
        f'<svg class="chart" role="img" aria-label="{escape(title)}" '
        f'viewBox="0 0 {width} {height:.0f}" width="{width}" '
        f'xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>'
    )
