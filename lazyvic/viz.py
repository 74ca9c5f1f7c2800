"""``lazyvic.viz``: traces and plans as Graphviz pictures (code in :mod:`lazyvic.tools.viz`).

``import lazyvic.viz`` works as a module import: ``draw``, ``render``, ``write_plans`` and
``viz_script`` are the tool's own functions.
"""

from lazyvic.tools.viz import FORMATS, draw, install_from_env, render, viz_script, write_plans

__all__ = ["FORMATS", "draw", "install_from_env", "render", "viz_script", "write_plans"]
