"""Templates: named, versioned graphs of stages, in Python or YAML, or LangGraph graphs."""

from stageline.templates._builder import END, Template
from stageline.templates._langgraph import GraphTemplate, graph_template, is_graph
from stageline.templates._project import use_project
from stageline.templates._registry import TemplateInfo, list_templates, load_template, runs_on
from stageline.templates._shape import Loop

__all__ = [
    "END",
    "GraphTemplate",
    "Loop",
    "Template",
    "TemplateInfo",
    "graph_template",
    "is_graph",
    "list_templates",
    "load_template",
    "runs_on",
    "use_project",
]
