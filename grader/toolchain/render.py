"""The one Jinja environment; every generated file and report comes from a template in grader/templates."""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from markupsafe import Markup, escape

from grader.core.locations import cache_root

if TYPE_CHECKING:
    import jinja2

# jinja2 is imported when a template is first rendered: a warm grade's build (a cache hit) renders
# none, and its import took 20 ms of the grade's way to its children (250 ms on the H100 host,
# whose jinja2 had no compiled bytecode); `--no-report --format json` renders no template at all.


def inline_code(text: str) -> Markup:
    """Escape text for HTML and show its `backticked` spans (as the rubric writes them) as <code>."""
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(text))))


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates kept in the build cache (compiling the reports' templates took longer
    than grading a warm submission's checks); a cache that cannot be written is only slower."""
    import jinja2  # noqa: PLC0415  (lazy: 20-250 ms, see above, on no warm grade's way)

    class Cache(jinja2.FileSystemBytecodeCache):
        def load_bytecode(self, bucket) -> None:
            try:
                super().load_bytecode(bucket)
            except (OSError, EOFError, ValueError):
                bucket.reset()

        def dump_bytecode(self, bucket) -> None:
            try:
                super().dump_bytecode(bucket)
            except OSError:
                pass

    folder = cache_root() / "templates"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return Cache(str(folder))


@functools.lru_cache(maxsize=None)
def environment() -> jinja2.Environment:
    import jinja2  # noqa: PLC0415  (lazy: 20-250 ms, see above, on no warm grade's way)

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("grader", "templates"),
        bytecode_cache=_bytecode_cache(),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html", "html.j2", "svg.j2"), default=False),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["pct"] = lambda v, digits=1: "n/a" if v is None else f"{100 * v:.{digits}f}%"
    env.filters["num"] = lambda v, fmt=".3f": "n/a" if v is None else format(v, fmt)
    env.filters["code"] = inline_code
    env.filters["esc"] = _rich_escape
    return env


def _rich_escape(text: str) -> str:
    """text with rich's markup escaped (the terminal summary's template prints through rich)."""
    from rich.markup import escape as escape_markup  # noqa: PLC0415  (lazy: 15-40 ms, off `submit -q`'s way)

    return escape_markup(text)


@functools.lru_cache(maxsize=None)
def template_digest(template: str) -> str:
    """What render(template, ...) depends on besides its context: the template's bytes and this
    module's (the environment's settings and filters). A build keyed on it and on the context
    renders its harness only when it builds (a warm grade's cache hit took 65 ms to render it)."""
    folder = Path(__file__).resolve().parent.parent / "templates"
    return hashlib.sha256((folder / template).read_bytes() + b"\0" + Path(__file__).read_bytes()).hexdigest()


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)
