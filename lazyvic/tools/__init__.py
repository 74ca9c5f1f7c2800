"""Tools that look inside lazyvic: explain (why it cut, missed, fell back), viz (plan drawings)."""

from lazyvic.tools import viz
from lazyvic.tools.explain import ExplainReport, explain
