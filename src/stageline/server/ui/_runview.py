"""What a run page shows, worked out from the ledger: each node's status, loop counts, notes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from stageline.ledger import INBOX_TYPES, NodeRecord, Run, RunStatus, Wait, WaitStatus
from stageline.server.ui._charts import fmt_seconds
from stageline.server.ui._graph import END, START, Edge, GraphLayout, Node, draw_graph, layout

if TYPE_CHECKING:
    from stageline.runner import Runner

__all__ = ["inbox_answer", "latest_records", "node_statuses", "run_graph", "template_layout"]

_LAYOUTS: dict[tuple[str, str], GraphLayout] = {}
_ENDED = tuple(s for s in RunStatus if s.terminal or s is RunStatus.FAILED)


def template_layout(runner: Runner, name: str) -> GraphLayout:
    """The laid-out graph of template ``name`` (cached per template version)."""
    from stageline.server.api.templates import _graph  # the one graph the API also serves

    made = runner.load(name)
    key = (made.name, made.full_version)
    if key not in _LAYOUTS:
        drawn = _graph(made)
        _LAYOUTS[key] = layout(
            [Node(n.id, n.kind) for n in drawn.nodes],
            [Edge(e.source, e.target, e.conditional, e.label) for e in drawn.edges],
        )
        if len(_LAYOUTS) > 200:
            _LAYOUTS.pop(next(iter(_LAYOUTS)))
    return _LAYOUTS[key]


def inbox_answer(wait: Wait) -> tuple[str, Any] | None:
    """How a person answered the Agent-Inbox ``HumanInterrupt`` ``wait`` asked: the response's
    type and what it carries (the edited args, the response's text, or None), else None."""
    if not wait.payload.get("human") or not wait.response:
        return None
    value = wait.response.get("value")
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, Mapping) or value.get("type") not in INBOX_TYPES:
        return None
    args = value.get("args")
    if value["type"] == "edit" and isinstance(args, Mapping):
        args = args.get("args", args)
    return str(value["type"]), args


def latest_records(records: Sequence[NodeRecord]) -> dict[str, NodeRecord]:
    """Each node's last attempt (by run attempt, then start, then try)."""
    latest: dict[str, NodeRecord] = {}
    for r in sorted(records, key=lambda r: (r.attempt, r.started_at, r.try_no)):
        latest[r.node] = r
    return latest


def node_statuses(
    g: GraphLayout, run: Run, records: Sequence[NodeRecord], waits: Sequence[Wait]
) -> dict[str, str]:
    """Each node's status in this run: its last record's, ``waiting`` where a person is asked,
    ``skipped`` for a node of an ended run whose predecessors all ran (a route went another
    way), ``not_reached`` otherwise."""
    latest = latest_records(records)
    out = {node: str(r.status) for node, r in latest.items()}
    for w in waits:
        if w.status is WaitStatus.PENDING:
            out[w.node] = "waiting"
    ended = run.status in _ENDED
    preds: dict[str, list[str]] = {}
    for i, e in enumerate(g.edges):
        if i not in g.back:
            preds.setdefault(e.target, []).append(e.source)
    out[START] = "succeeded" if records or run.status is not RunStatus.QUEUED else "not_reached"
    for n in g.nodes:
        if n.id in out:
            continue
        if n.id == END:
            out[END] = "succeeded" if run.status is RunStatus.SUCCEEDED else "not_reached"
            continue
        ran = [p for p in preds.get(n.id, []) if out.get(p) == "succeeded"]
        out[n.id] = "skipped" if ended and ran and len(ran) == len(preds[n.id]) else "not_reached"
    return out


def _loop_counts(g: GraphLayout, records: Sequence[NodeRecord]) -> dict[int, int]:
    """How often each loop edge was taken: the runs of its target after the first."""
    runs: dict[str, set[tuple[int, str]]] = {}
    for r in records:
        runs.setdefault(r.node, set()).add((r.attempt, r.task_id))
    return {i: max(0, len(runs.get(g.edges[i].target, ())) - 1) for i in g.back}


def _notes(records: Sequence[NodeRecord], statuses: dict[str, str]) -> dict[str, str]:
    notes: dict[str, str] = {}
    for node, r in latest_records(records).items():
        tries = f" · try {r.try_no}" if r.try_no > 1 else ""
        shown = statuses.get(node, "")
        notes[node] = (
            f"{fmt_seconds(r.duration)}{tries}"
            if r.duration is not None and shown not in ("waiting", "running")
            else shown + tries
        )
    return notes


def run_graph(
    runner: Runner, run: Run, records: Sequence[NodeRecord], waits: Sequence[Wait]
) -> tuple[Markup, dict[str, str]]:
    """The run's graph picture, and each node's status in it."""
    try:
        g = template_layout(runner, run.template)
    except Exception as exc:  # the template is gone or broken: the rest of the page still works
        return Markup(
            '<p class="notice error" data-no-graph>No graph: template {} cannot be loaded ({}).</p>'
        ).format(repr(run.template), type(exc).__name__), {}
    statuses = node_statuses(g, run, records, waits)
    svg = draw_graph(
        g,
        statuses,
        notes=_notes(records, statuses),
        loops=_loop_counts(g, records),
        link="#node-",
        label=f"graph of run {run.run_id}",
    )
    return svg, statuses
