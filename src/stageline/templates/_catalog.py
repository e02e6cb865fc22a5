"""The stage catalog: every stage a template can name, with the metadata an architect composes
by (capability, description, tier, cost, retry policy, the state keys it reads and writes,
whether it asks a person), and what its past runs cost where outcomes were recorded.

Stages come from the built-in templates, installed packages (``stageline.templates`` entry
points), the project (``stage_modules``, the templates folders' Python files) and the graphs of
the project's ``langgraph.json`` (listed, not composable: a YAML template cannot name their
nodes). ``ref`` is what a YAML template's ``stages:`` entry names.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    NotRequired,
    Required,
    get_args,
    get_origin,
    get_type_hints,
)

from stageline.stages import Stage, infer_stage, registered_stages
from stageline.templates._builder import Template
from stageline.templates._langgraph import GraphTemplate
from stageline.templates._project import import_project_stages
from stageline.templates._registry import BUILTINS, list_templates, load_template

if TYPE_CHECKING:
    from stageline.ledger import LedgerStore

__all__ = ["CatalogEntry", "Measured", "build_catalog", "measure_stages", "with_measured"]

MEASURED_OUTCOMES = 5000
"""The newest outcome rows read to measure each stage's cost and latency."""


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What a stage's recorded runs cost: counts, failure rate, median latency, means."""

    runs: int
    failure_rate: float
    latency_p50: float
    mean_cost: float
    mean_tokens: float


@dataclass(frozen=True, kw_only=True)
class CatalogEntry:
    """One stage as the architect sees it."""

    ref: str
    """The stage's name in the catalog: its registered name, else ``module:attr``."""
    use: str
    """What a YAML template's ``stages:`` entry names to find it in any process: the
    registered name for the project's stages, else an import path (``module:attr``)."""
    stage: str
    """The stage's own name, as its outcomes record it."""
    capability: str | None
    description: str
    origin: str
    """``builtin``, ``installed``, ``project`` or ``langgraph.json``."""
    tier: str
    """``code`` (no model), ``model`` (calls the run's chat model), ``agent`` (a harness runs
    an agent) or ``graph`` (a node of a LangGraph graph); a stage may declare its own."""
    cost_class: str | None
    retry: dict[str, Any] | None
    timeout: float | None
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    requires: tuple[str, ...]
    """The reads it cannot do without: a template that uses it must provide them."""
    reads_from: str
    writes_from: str
    asks_person: bool
    templates: tuple[str, ...] = ()
    """The templates whose nodes use it."""
    key_types: dict[str, str] = field(default_factory=dict)
    """YAML type names of the state keys of the first template that uses it."""
    composable: bool = True
    measured: Measured | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _first_line(fn: Any) -> str:
    doc = (getattr(fn, "__doc__", None) or "").strip()
    return doc.splitlines()[0].strip() if doc else ""


def _origin(fn: Any, root: Path) -> str:
    module = getattr(fn, "__module__", "") or ""
    if module.startswith("stageline."):
        return "builtin"
    if module.startswith("stageline_user_templates."):
        return "project"
    path = getattr(sys.modules.get(module), "__file__", None) or ""
    return (
        "project" if path and Path(path).resolve().is_relative_to(root.resolve()) else "installed"
    )


def _retry(made: Stage) -> dict[str, Any] | None:
    if made.retry is None:
        return None
    return {
        "max_attempts": made.retry.max_attempts,
        "initial_interval": made.retry.initial_interval,
        "backoff_factor": made.retry.backoff_factor,
    }


_YAML_TYPES = {str: "str", int: "int", float: "float", bool: "bool", list: "list", dict: "dict"}


def _type_name(hint: Any) -> str:
    """The YAML template type of a state key's hint (``any`` where none fits)."""
    while get_origin(hint) in (Required, NotRequired, Annotated):
        hint = get_args(hint)[0]
    return _YAML_TYPES.get(get_origin(hint) or hint, "any")


@dataclass(frozen=True, kw_only=True)
class _Home:
    """What the first template that uses a stage says about its state."""

    types: dict[str, str]
    required: tuple[str, ...]


def _home(made: Template) -> _Home:
    try:
        hints = get_type_hints(made.state, include_extras=True)
    except Exception:  # a hint that cannot be resolved: the keys stay untyped
        hints = dict.fromkeys(getattr(made.state, "__annotations__", {}), Any)
    required = set(getattr(made.state, "__required_keys__", ())) | set(made.required_inputs)
    return _Home(
        types={k: _type_name(v) for k, v in hints.items()},
        required=tuple(sorted(k for k in required if k in hints)),
    )


def _entry(
    ref: str, made: Stage, root: Path, templates: Sequence[str], home: _Home | None
) -> CatalogEntry:
    found = infer_stage(made)
    tier = made.metadata.get("tier")
    if not isinstance(tier, str):
        tier = "agent" if made.capability == "agent" else "model" if found.uses_model else "code"
    reads, requires, reads_from = found.reads, found.requires, found.reads_from
    if tier == "agent" and home is not None and found.reads_from != "declared":
        # An operation reads its inputs through helpers: its template's state says them.
        reads, requires, reads_from = tuple(home.types), home.required, "template state"
    origin = _origin(made.fn, root)
    use = ref
    if origin != "project" and ":" not in ref:
        use = _module_ref(made, str(getattr(made.fn, "__module__", ""))) or ref
    return CatalogEntry(
        ref=ref,
        use=use,
        stage=made.name,
        capability=made.capability,
        description=_first_line(made.fn),
        origin=origin,
        tier=tier,
        cost_class=made.cost_class,
        retry=_retry(made),
        timeout=made.timeout,
        reads=reads,
        writes=found.writes,
        requires=requires,
        reads_from=reads_from,
        writes_from=found.writes_from,
        asks_person=found.asks_person,
        templates=tuple(sorted(set(templates))),
        key_types=dict(home.types) if home is not None else {},
        composable=made.metadata.get("composable", True) is not False,
    )


def _module_ref(made: Stage, module: str) -> str | None:
    """``module:attr`` where ``module`` holds this very stage object, else None."""
    for attr, value in vars(sys.modules.get(module) or object()).items():
        if value is made and not attr.startswith("__"):
            return f"{module}:{attr}"
    return None


def _graph_entries(made: GraphTemplate, root: Path) -> list[CatalogEntry]:
    entries = []
    for node, spec in made.graph.nodes.items():
        runnable = getattr(spec, "runnable", None)
        fn = getattr(runnable, "func", None) or getattr(runnable, "afunc", None)
        found = infer_stage(Stage(fn=fn, name=node)) if fn is not None else None
        entries.append(
            CatalogEntry(
                ref=f"{made.name}/{node}",
                use=f"{made.name}/{node}",
                stage=node,
                capability=None,
                description=_first_line(fn),
                origin="langgraph.json",
                tier="graph",
                cost_class=None,
                retry=None,
                timeout=None,
                reads=found.reads if found else (),
                writes=found.writes if found else (),
                requires=found.requires if found else (),
                reads_from=found.reads_from if found else "unknown",
                writes_from=found.writes_from if found else "unknown",
                asks_person=bool(found and found.asks_person),
                templates=(made.name,),
                composable=False,
            )
        )
    return entries


def build_catalog(root: Path, template_dirs: Iterable[Path] = ()) -> list[CatalogEntry]:
    """Every stage findable from ``root``'s project, by ``ref``; ``use_project`` first."""
    dirs = list(template_dirs)
    import_project_stages()
    used: dict[int, list[str]] = {}
    about: dict[int, str] = {}
    homes: dict[int, _Home] = {}
    """A stage without a docstring is described by the first template that uses it."""
    unregistered: dict[int, tuple[Stage, str]] = {}
    graphs: list[CatalogEntry] = []
    for info in list_templates(dirs):
        if info.origin == "path":
            continue
        try:
            made: Template = load_template(info.name, dirs)
        except Exception:  # a broken template is reported when it is run, not listed here
            continue
        if isinstance(made, GraphTemplate):
            graphs.extend(_graph_entries(made, root))
            continue
        for node in made.nodes:
            stage_of = made.stage_of(node)
            used.setdefault(id(stage_of), []).append(made.name)
            if id(stage_of) not in homes:
                homes[id(stage_of)] = _home(made)
            summary = (made.description or "").strip().splitlines()
            about.setdefault(
                id(stage_of),
                f"the {node} step of {made.name}: " + summary[0]
                if summary
                else f"the {node} step of {made.name}",
            )
            module = BUILTINS.get(info.name) or str(getattr(stage_of.fn, "__module__", ""))
            if id(stage_of) not in unregistered and not stage_of.metadata.get("machinery"):
                ref = _module_ref(stage_of, module)
                if ref is not None:
                    unregistered[id(stage_of)] = (stage_of, ref)
    by_ref = dict(registered_stages())
    for made_stage, ref in unregistered.values():
        if all(s is not made_stage for s in by_ref.values()):
            by_ref.setdefault(ref, made_stage)
    entries = []
    for ref, made_stage in by_ref.items():
        entry = _entry(
            ref, made_stage, root, used.get(id(made_stage), ()), homes.get(id(made_stage))
        )
        if not entry.description:
            entry = replace(entry, description=about.get(id(made_stage), ""))
        entries.append(entry)
    return sorted(entries, key=lambda e: (e.capability or "~", e.ref)) + graphs


async def measure_stages(ledger: LedgerStore) -> dict[str, Measured]:
    """Each stage's measured cost and latency, from the newest recorded outcomes."""
    rows = await ledger.outcomes(limit=MEASURED_OUTCOMES)
    by_stage: dict[str, list[Any]] = {}
    for row in rows:
        by_stage.setdefault(row.stage, []).append(row)
    measured = {}
    for name, mine in by_stage.items():
        latencies = sorted(r.latency for r in mine)
        measured[name] = Measured(
            runs=len(mine),
            failure_rate=sum(r.status == "failed" for r in mine) / len(mine),
            latency_p50=latencies[(len(latencies) - 1) // 2],
            mean_cost=sum(r.cost for r in mine) / len(mine),
            mean_tokens=sum(r.tokens for r in mine) / len(mine),
        )
    return measured


def with_measured(
    entries: Iterable[CatalogEntry], measured: Mapping[str, Measured]
) -> list[CatalogEntry]:
    """The entries, each with its stage's measured runs where there are some."""
    return [replace(e, measured=measured.get(e.stage) or measured.get(e.ref)) for e in entries]
