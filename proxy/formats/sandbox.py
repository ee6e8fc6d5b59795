"""A jinja2 sandbox for per-message templates: no attributes, no calls, no loops, capped output."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from proxy.errors import ProxyError

VARIABLES = frozenset({"content", "role", "name"})
"""All a template can see: the message text, its role and its sender's name ("" when absent)."""

FILTERS = frozenset({"trim", "upper", "lower", "capitalize", "title", "default", "d", "length"})
"""The documented helpers; none can grow its input."""

TESTS = frozenset({"defined", "undefined", "none", "string", "eq", "equalto", "ne", "in"})

# A whitelist, not a blacklist: a message template needs text, `{{ }}`, `{% if %}` and
# expressions. No `for`/`set`/`macro`/`include` means rendering is linear in template size.
_ALLOWED_NODES: tuple[type[nodes.Node], ...] = (
    nodes.Template,
    nodes.Output,
    nodes.TemplateData,
    nodes.If,
    nodes.Name,
    nodes.Const,
    nodes.CondExpr,
    nodes.Filter,
    nodes.Keyword,
    nodes.Test,
    nodes.Compare,
    nodes.Operand,
    nodes.And,
    nodes.Or,
    nodes.Not,
    nodes.Concat,
    nodes.Add,
    nodes.Getitem,
    nodes.Slice,
    nodes.Neg,
    nodes.Pos,
    nodes.List,
    nodes.Tuple,
)

MAX_TEMPLATE_CHARS = 16_384
MAX_VARIABLE_USES = 16
"""Bounds one expression's growth: `content ~ content ~ ...` at most this many times."""


class TemplateRejected(ProxyError):
    """A format's template is unsafe or broken; raised when the format is imported."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="invalid_format", param="format")


class OutputTooLarge(ProxyError):
    """A rendered message or prompt exceeds the configured cap (413)."""

    status = 413

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(
            f"rendered {what} exceeds {limit} characters", code="prompt_too_large", param="messages"
        )


@dataclass(frozen=True)
class RenderLimits:
    """Output caps in characters; the sandbox limits attributes, not memory, so we cap here."""

    max_message_chars: int = 4 * 1024 * 1024
    max_prompt_chars: int = 16 * 1024 * 1024


DEFAULT_LIMITS = RenderLimits()


class _Env(ImmutableSandboxedEnvironment):
    """Refuses every attribute, every call, and the operators that multiply strings."""

    intercepted_binops = frozenset({"*", "**", "%", "//"})

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        return False

    def is_safe_callable(self, obj: Any) -> bool:
        return False

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        raise SecurityError("templates may not call anything")

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        raise SecurityError(f"operator {operator!r} is not allowed in templates")


def _make_env() -> _Env:
    env = _Env(
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,  # "<|im_end|>\n" must keep its newline
    )
    env.globals.clear()  # no range, dict, lipsum, cycler, joiner, namespace
    env.filters = {k: v for k, v in env.filters.items() if k in FILTERS}
    env.tests = {k: v for k, v in env.tests.items() if k in TESTS}
    return env


ENV = _make_env()


def _check_ast(source: str) -> None:
    try:
        tree = ENV.parse(source)
    except TemplateSyntaxError as exc:
        raise TemplateRejected(f"template syntax error: {exc.message} (line {exc.lineno})") from exc
    uses = 0
    for node in tree.find_all(nodes.Node):
        if not isinstance(node, _ALLOWED_NODES):
            kind = type(node).__name__
            raise TemplateRejected(
                f"template uses {kind!r}, which is not allowed (templates render one message: "
                "text, {{ content }}, {{ role }}, {{ name }}, {% if %} and filters "
                f"{', '.join(sorted(FILTERS))})"
            )
        if isinstance(node, nodes.Name):
            if node.ctx != "load" or node.name not in VARIABLES:
                raise TemplateRejected(
                    f"template refers to {node.name!r}; only content, role and name are visible"
                )
            uses += 1
        elif isinstance(node, nodes.Filter) and node.name not in FILTERS:
            raise TemplateRejected(
                f"filter {node.name!r} is not allowed; allowed: {', '.join(sorted(FILTERS))}"
            )
        elif isinstance(node, nodes.Test) and node.name not in TESTS:
            raise TemplateRejected(f"test {node.name!r} is not allowed")
    if uses > MAX_VARIABLE_USES:
        raise TemplateRejected(f"template uses variables more than {MAX_VARIABLE_USES} times")


@lru_cache(maxsize=1024)
def compile_template(source: str) -> Any:
    """Check and compile a template; raises TemplateRejected when it is unsafe or broken."""
    if len(source) > MAX_TEMPLATE_CHARS:
        raise TemplateRejected(f"template is longer than {MAX_TEMPLATE_CHARS} characters")
    _check_ast(source)
    return ENV.from_string(source)


def render_template(
    source: str, content: str, role: str, name: str, limits: RenderLimits = DEFAULT_LIMITS
) -> str:
    """Render one message; the output is capped while it is produced, not after."""
    template = compile_template(source)
    parts: list[str] = []
    size = 0
    chunks: Iterator[str] = template.generate(content=content, role=role, name=name)
    for chunk in chunks:
        size += len(chunk)
        if size > limits.max_message_chars:
            raise OutputTooLarge("message", limits.max_message_chars)
        parts.append(chunk)
    return "".join(parts)


def escape_literal(text: str) -> str:
    """Template source that renders `text` verbatim (every `{` is emitted by an expression)."""
    return text.replace("{", "{{ '{' }}")
