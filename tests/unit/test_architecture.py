"""Architecture rules the import-linter contract cannot express (seed 003's guardrails).

Harness requests, event classification, transcripts and failure recording live in
``stageline.operations``; templates and interfaces call ``operation_stage`` or the runner and
never copy that plumbing. Built-in templates may use the runtime's operations (the one
exception in the layers contract) only because nothing imports them statically.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import stageline

PACKAGE = Path(stageline.__file__).parent

OPERATION_MODULES = (
    "__init__.py",
    "_runner.py",
    "_classify.py",
    "_recorder.py",
    "_stage.py",
    "_models.py",
)
HARNESS_MODULES = (
    "__init__.py",
    "_types.py",
    "_parsers.py",
    "_command.py",
    "_chat.py",
    "_scripted.py",
    "_scripted_agent.py",
    "_registry.py",
)

PLUMBING = (
    "HarnessRequest",  # building harness requests
    "OperationRunner",  # driving the lifecycle by hand
    "fallback_event",  # harness event helpers
    "ledger_fields",
    "Transcript(",
    "LedgerEventSink",
    "OperationFailed(",  # finishing an operation as failed
    "operation.failed",
    "operation.finished",
    "stageline.operations._",  # reaching past the public API
    "stageline.harnesses._",
)
"""Fragments of operation plumbing that belong to ``stageline.operations`` alone."""

PUBLIC_TO_TEMPLATES = {
    "operation_stage",
    "OperationContext",
    "OperationInputs",
    "PostStep",
    "FailurePhase",
    "SERVICE_HARNESS",
    "SERVICE_LIVE",
    "SERVICE_SINKS",
    "HarnessEventSink",
    "LiveCallback",
    "transcript_path",
    "SERVICE_FRESH",
    # isolation: templates prepare the worktree, commit or revert it, apply it to the checkout
    "Isolation",
    "isolate",
    "commit_all",
    "revert",
    "apply_to_checkout",
    # the apply gate after isolated operations, and what a write outside their paths raises
    "add_apply",
    "apply_changes",
    "isolation_of",
    "WritesOutside",
}
"""What templates and interfaces may import from ``stageline.operations``."""

OUTSIDE = ("templates", "cli", "api", "worker")
"""Template and interface packages: none may hold operation plumbing."""


def _modules(*folders: str) -> list[Path]:
    found: list[Path] = []
    for folder in folders:
        if (PACKAGE / folder).is_dir():
            found += sorted((PACKAGE / folder).rglob("*.py"))
    return found


def test_the_operation_and_harness_modules_exist() -> None:
    for name in OPERATION_MODULES:
        assert (PACKAGE / "operations" / name).is_file(), name
    for name in HARNESS_MODULES:
        assert (PACKAGE / "harnesses" / name).is_file(), name


@pytest.mark.parametrize("path", _modules(*OUTSIDE), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_template_or_interface_copies_operation_plumbing(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    found = [fragment for fragment in PLUMBING if fragment in text]
    assert not found, f"{path.relative_to(PACKAGE)} holds operation plumbing: {found}"


@pytest.mark.parametrize("path", _modules(*OUTSIDE), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_templates_and_interfaces_use_only_the_operation_stage_api(path: Path) -> None:
    names = {n.rpartition(".")[2] for n in _imports(path) if n.startswith("stageline.operations.")}
    assert names <= PUBLIC_TO_TEMPLATES, (path.relative_to(PACKAGE), names - PUBLIC_TO_TEMPLATES)


def test_operations_do_not_finish_runs_themselves() -> None:
    """The runner owns run transitions; an operation fails its node by raising."""
    for path in _modules("operations", "harnesses"):
        text = path.read_text(encoding="utf-8")
        assert ".transition(" not in text and "RunStatus" not in text, path.name


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_nothing_imports_a_built_in_template_statically() -> None:
    """The registry loads built-ins by name; so their use of operations reaches no lower layer."""
    builtin = PACKAGE / "templates" / "builtin"
    for path in sorted(PACKAGE.rglob("*.py")):
        if builtin in path.parents:
            continue
        leaked = [n for n in _imports(path) if n.startswith("stageline.templates.builtin")]
        assert not leaked, f"{path.relative_to(PACKAGE)} imports {leaked}"


def test_harnesses_depend_on_no_stageline_layer_above_errors() -> None:
    for path in _modules("harnesses"):
        ours = {n for n in _imports(path) if n.startswith("stageline.")}
        assert all(n.startswith(("stageline.errors", "stageline.harnesses")) for n in ours), (
            path.name,
            ours,
        )


def test_the_ledger_package_has_no_import_circle() -> None:
    """Issue 15: no module of ``stageline.ledger`` imports one that imports it back, counting
    imports inside functions and under ``TYPE_CHECKING`` and the package's ``__init__`` (which
    the ``acyclic_siblings`` contract of ``pyproject.toml`` leaves out)."""
    folder = PACKAGE / "ledger"
    names = {
        path: "stageline.ledger" if path.stem == "__init__" else f"stageline.ledger.{path.stem}"
        for path in folder.glob("*.py")
    }
    modules = set(names.values())
    graph = {
        module: {n for n in _imports(path) if n in modules and n != module}
        for path, module in names.items()
    }
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        pytest.fail(f"an import circle in stageline.ledger: {' -> '.join(exc.args[1])}")


MAX_MODULE_LINES = 500
"""A module a newcomer can hold in their head (CONVENTIONS.md: one concept, small)."""


def test_no_module_of_the_package_is_over_500_lines() -> None:
    lengths = {
        str(path.relative_to(PACKAGE)): len(path.read_text().splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    over = {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES}
    assert not over, f"split these where their concepts split: {over}"
