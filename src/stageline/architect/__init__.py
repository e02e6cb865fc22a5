"""The architect: a pipeline composed from a goal over the stage catalog."""

from stageline.architect._compose import (
    Composed,
    check_yaml,
    compose_goal,
    compose_offline,
    render_plan,
    revise_or_go_on,
    templates_folder,
)
from stageline.architect._intent import Intent, read_goal
from stageline.architect._plan import Plan, plan_goal, template_name
from stageline.architect._with_model import compose_with_model

__all__ = [
    "Composed",
    "Intent",
    "Plan",
    "check_yaml",
    "compose_goal",
    "compose_offline",
    "compose_with_model",
    "plan_goal",
    "read_goal",
    "render_plan",
    "revise_or_go_on",
    "template_name",
    "templates_folder",
]
