"""Templates: named, versioned graphs of stages, in Python or YAML, or LangGraph graphs."""

from stageline.templates._builder import END, Template
from stageline.templates._catalog import (
    CatalogEntry,
    Measured,
    build_catalog,
    measure_stages,
    with_measured,
)
from stageline.templates._langgraph import GraphTemplate, graph_template, is_graph
from stageline.templates._project import use_project
from stageline.templates._registry import TemplateInfo, list_templates, load_template, runs_on
from stageline.templates._shape import Loop

__all__ = [
    "END",
    "CatalogEntry",
    "GraphTemplate",
    "Loop",
    "Measured",
    "Template",
    "TemplateInfo",
    "build_catalog",
    "graph_template",
    "is_graph",
    "list_templates",
    "load_template",
    "measure_stages",
    "runs_on",
    "use_project",
    "with_measured",
]
