"""A template's graph as an SVG picture: a layered layout computed here, top to bottom.

Layers are the longest path from the start over forward edges; an edge back to a node already
on the path (a loop, a gate's request for changes) is drawn on the right, curving up, with how
often it was taken. Each node carries its status in this run as data (``data-node``,
``data-status``), so a test reads the picture as a ledger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape

from markupsafe import Markup

__all__ = ["NODE_STATUSES", "Edge", "GraphLayout", "Node", "draw_graph", "layout"]

NODE_STATUSES = ("succeeded", "failed", "running", "waiting", "skipped", "not_reached")
W, H = 150.0, 38.0
PITCH_X, PITCH_Y = 172.0, 74.0
MARGIN = 24.0
LEFT = 40.0
"""Room on the left for edges that go round the layers between (and their labels)."""
LOOP_GAP = 26.0
START, END = "__start__", "__end__"


@dataclass(frozen=True)
class Node:
    id: str
    kind: str


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    conditional: bool = False
    label: str | None = None


@dataclass
class GraphLayout:
    nodes: list[Node]
    edges: list[Edge]
    layer: dict[str, int] = field(default_factory=dict)
    pos: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Centre of each node."""
    back: set[int] = field(default_factory=set)
    """Indexes of the edges drawn as loops."""
    width: float = 0.0
    height: float = 0.0


def _back_edges(nodes: Sequence[Node], edges: Sequence[Edge]) -> set[int]:
    out: dict[str, list[int]] = {n.id: [] for n in nodes}
    for i, e in enumerate(edges):
        out.setdefault(e.source, []).append(i)
    state: dict[str, int] = {}  # 1 on the path, 2 done
    back: set[int] = set()
    roots = [START] + [n.id for n in nodes if n.id != START]
    for root in roots:
        if root in state:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            node, i = stack[-1]
            todo = out.get(node, [])
            if i >= len(todo):
                state[node] = 2
                stack.pop()
                continue
            stack[-1] = (node, i + 1)
            target = edges[todo[i]].target
            if state.get(target) == 1:
                back.add(todo[i])
            elif target not in state:
                state[target] = 1
                stack.append((target, 0))
    return back


def layout(nodes: Sequence[Node], edges: Sequence[Edge]) -> GraphLayout:
    """Layers by longest path over forward edges, ordered in each layer to cut crossings."""
    found = GraphLayout(nodes=list(nodes), edges=list(edges))
    ids = [n.id for n in nodes]
    back = _back_edges(nodes, edges)
    found.back = back
    forward = [e for i, e in enumerate(edges) if i not in back]
    layer = {n: 0 for n in ids}
    for _ in range(len(ids)):  # Bellman-Ford style: the graph without back edges is a DAG
        changed = False
        for e in forward:
            if e.source in layer and e.target in layer and layer[e.target] < layer[e.source] + 1:
                layer[e.target] = layer[e.source] + 1
                changed = True
        if not changed:
            break
    if END in layer:
        layer[END] = max(layer.values())
    found.layer = layer
    rows: dict[int, list[str]] = {}
    for n in ids:
        rows.setdefault(layer[n], []).append(n)
    preds: dict[str, list[str]] = {n: [] for n in ids}
    for e in forward:
        if e.target in preds:
            preds[e.target].append(e.source)
    index: dict[str, float] = {}
    for _ in range(2):
        for depth in sorted(rows):
            row = rows[depth]
            for i, n in enumerate(row):
                mine = [index[p] for p in preds[n] if p in index]
                index[n] = sum(mine) / len(mine) if mine else float(i)
            row.sort(key=lambda n: index[n])
            for i, n in enumerate(row):
                index[n] = float(i)
    widest = max((len(r) for r in rows.values()), default=1)
    for depth, row in rows.items():
        offset = (widest - len(row)) * PITCH_X / 2
        for i, n in enumerate(row):
            found.pos[n] = (
                LEFT + MARGIN + offset + i * PITCH_X + W / 2,
                MARGIN + depth * PITCH_Y + H / 2,
            )
    found.width = LEFT + MARGIN * 2 + (widest - 1) * PITCH_X + W + LOOP_GAP * (len(back) + 1)
    found.height = MARGIN * 2 + max(rows, default=0) * PITCH_Y + H
    return found


def _label(x: float, y: float, text: str, cls: str, anchor: str = "middle") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" class="{cls}" text-anchor="{anchor}">{escape(text)}</text>'
    )


def _edge(
    g: GraphLayout, i: int, e: Edge, loops: Mapping[int, int], right: float, rank: int
) -> str:
    sx, sy = g.pos[e.source]
    tx, ty = g.pos[e.target]
    cls = "edge" + (" conditional" if e.conditional else "")
    label = (
        e.label
        if e.label and not e.label.startswith("__")
        else ("out of rounds" if e.label else None)
    )
    attrs = f'data-edge="{escape(e.source)}->{escape(e.target)}"'
    parts: list[str] = []
    if i in g.back:
        x = right + LOOP_GAP * rank
        d = (
            f"M{sx + W / 2:.1f},{sy:.1f} C{x:.1f},{sy:.1f} {x:.1f},{ty:.1f} "
            f"{tx + W / 2 + 2:.1f},{ty:.1f}"
        )
        count = loops.get(i, 0)
        attrs += f' data-loop="true" data-iterations="{count}"'
        parts.append(f'<path class="{cls} loop" d="{d}" marker-end="url(#arrow)" {attrs}/>')
        text = (f"{label} " if label else "") + (f"\u00d7{count}" if count else "loop")
        parts.append(_label(x - 4, (sy + ty) / 2, text, "edge-label loop-label"))
        return "".join(parts)
    y1, y2 = sy + H / 2, ty - H / 2 - 2
    mid = (y1 + y2) / 2
    if g.layer.get(e.target, 0) - g.layer.get(e.source, 0) > 1:  # around the layers between
        left = sx <= (MARGIN + g.width) / 2
        bend = (min(sx, tx) - W / 2 - 14) if left else (max(sx, tx) + W / 2 + 14)
        d = (
            f"M{sx:.1f},{y1:.1f} C{bend:.1f},{y1 + PITCH_Y / 2:.1f} "
            f"{bend:.1f},{y2 - PITCH_Y / 2:.1f} {tx:.1f},{y2:.1f}"
        )
        mid_x, anchor = bend, "middle"
    else:
        d = f"M{sx:.1f},{y1:.1f} C{sx:.1f},{mid:.1f} {tx:.1f},{mid:.1f} {tx:.1f},{y2:.1f}"
        mid_x = (sx + tx) / 2 + 6
        anchor = "middle"
    parts.append(f'<path class="{cls}" d="{d}" marker-end="url(#arrow)" {attrs}/>')
    if label:
        parts.append(_label(mid_x, mid + 4, label, "edge-label", anchor))
    return "".join(parts)


def _node(g: GraphLayout, n: Node, status: str, note: str | None, href: str | None) -> str:
    x, y = g.pos[n.id]
    attrs = (
        f'data-node="{escape(n.id)}" data-status="{escape(status)}" data-kind="{escape(n.kind)}"'
    )
    said = status.replace("_", " ")
    title = f"{n.id} ({n.kind}): {said}" + (f", {note}" if note and note != status else "")
    if n.id in (START, END):
        word = "start" if n.id == START else "end"
        return (
            f'<g class="node terminal st-{escape(status)}" {attrs}><title>{escape(title)}</title>'
            f'<rect x="{x - 34:.1f}" y="{y - 14:.1f}" width="68" height="28" rx="14"/>'
            f"{_label(x, y + 4, word, 'node-label')}</g>"
        )
    shape = (
        f'<rect x="{x - W / 2:.1f}" y="{y - H / 2:.1f}" width="{W}" height="{H}" '
        f'rx="{4 if n.kind == "stage" else 12}"/>'
    )
    badge = {"gate": "◆ ", "question": "? "}.get(n.kind, "")
    text = n.id if len(n.id) <= 18 else n.id[:17] + "…"
    body = _label(x, y + (0 if note else 4.5), badge + text, "node-label")
    if note:
        body += _label(x, y + 13, note, "node-note")
    inner = f"<title>{escape(title)}</title>{shape}{body}"
    if href:
        inner = f'<a href="{escape(href)}">{inner}</a>'
    return f'<g class="node kind-{escape(n.kind)} st-{escape(status)}" {attrs}>{inner}</g>'


def draw_graph(
    g: GraphLayout,
    statuses: Mapping[str, str] | None = None,
    *,
    notes: Mapping[str, str] | None = None,
    loops: Mapping[int, int] | None = None,
    link: str | None = None,
    label: str = "graph",
) -> Markup:
    """The SVG: nodes coloured by ``statuses`` (default ``not_reached``), loop edges with
    ``loops[edge index]`` iterations, nodes linked to ``link + node id`` when given."""
    statuses, notes, loops = statuses or {}, notes or {}, loops or {}
    right = max((x for x, _ in g.pos.values()), default=0.0) + W / 2 + LOOP_GAP
    edges = [
        _edge(g, i, e, loops, right, rank)
        for rank, (i, e) in enumerate((i, e) for i, e in enumerate(g.edges) if i in g.back)
    ]
    edges += [_edge(g, i, e, loops, right, 0) for i, e in enumerate(g.edges) if i not in g.back]
    nodes = [
        _node(
            g,
            n,
            statuses.get(n.id, "not_reached"),
            notes.get(n.id),
            f"{link}{n.id}" if link and n.id not in (START, END) else None,
        )
        for n in g.nodes
    ]
    defs = (
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'class="arrowhead"/></marker></defs>'
    )
    return Markup(
        f'<svg class="graph" role="img" aria-label="{escape(label)}" '
        f'viewBox="0 0 {g.width:.0f} {g.height:.0f}" width="{g.width:.0f}" '
        f'xmlns="http://www.w3.org/2000/svg">{defs}<g class="edges">{"".join(edges)}</g>'
        f'<g class="nodes">{"".join(nodes)}</g></svg>'
    )
