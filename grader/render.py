"""The one Jinja environment; every generated file and report comes from a template in grader/templates."""

from __future__ import annotations

import functools
import re
from typing import Any

import jinja2
from markupsafe import Markup, escape


def inline_code(text: str) -> Markup:
    """Escape text for HTML and show its `backticked` spans (as the rubric writes them) as <code>."""
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(text))))


@functools.lru_cache(maxsize=None)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("grader", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html", "html.j2", "svg.j2"), default=False),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["pct"] = lambda v, digits=1: "n/a" if v is None else f"{100 * v:.{digits}f}%"
    env.filters["num"] = lambda v, fmt=".3f": "n/a" if v is None else format(v, fmt)
    env.filters["code"] = inline_code
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)
