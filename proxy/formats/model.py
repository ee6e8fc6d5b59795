"""An instruct format as data: per-role templates, BOS/EOS, stops and the system-role policy."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from proxy.formats.sandbox import TemplateRejected, compile_template, render_template
from proxy.formats.tools import ToolConvention

PRESET_VERSION = 2
"""Current version of the preset JSON; older versions are migrated on import."""

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")

SystemMode = Literal["native", "merge_first_user", "merge_last_user", "as_user"]
"""How system messages are rendered:
- native: with the `system` template;
- merge_first_user / merge_last_user: leading system text is prepended to the first / last
  user message (Gemma, Mistral v1 / Mistral v3), other system messages render as user turns;
- as_user: every system message renders with the `user` template."""

ToolMode = Literal["native", "as_user"]
"""How tool results are rendered: with the `tool` template, or as user turns (families without
a tool role: Gemma, Mistral v1)."""


class RoleTemplate(BaseModel):
    """Templates for one role; `first`/`last` apply to the first/last message of that role."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    template: str
    first: str | None = None
    last: str | None = None
    trim: bool = False
    """Strip the content before templating, as official templates do with `| trim`."""

    def sources(self) -> list[str]:
        return [s for s in (self.template, self.first, self.last) if s is not None]


class Templates(BaseModel):
    """One template set per role; a role a family lacks still needs a rendering."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: RoleTemplate
    user: RoleTemplate
    assistant: RoleTemplate
    tool: RoleTemplate
    tool_calls: RoleTemplate | None = None
    """An assistant message that calls tools (`content`: the calls as the format's tool
    convention writes them); None: the assistant template."""

    def for_role(self, role: Role) -> RoleTemplate:
        result: RoleTemplate = getattr(self, role)
        return result

    def all(self) -> list[tuple[str, RoleTemplate]]:
        named: list[tuple[str, RoleTemplate]] = [(role, self.for_role(role)) for role in ROLES]
        return named + ([("tool_calls", self.tool_calls)] if self.tool_calls else [])


_MARK = "\x00194712\x00"


class InstructFormat(BaseModel):
    """A validated instruct format; constructing one test-renders every template."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[2] = 2
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    aliases: list[str] = Field(default_factory=list)
    """More names it answers to, matched case-insensitively (a SillyTavern preset: the name
    SillyTavern shows, e.g. `Llama 3 Instruct`)."""
    description: str = ""
    source: str = ""
    """Where the rendering comes from (official template URL or repo+path)."""
    bos: str = ""
    eos: str = ""
    bos_in_prompt: bool = False
    """The official template starts the prompt with BOS; rendered only with include_bos=True."""
    system_mode: SystemMode = "native"
    system_merge_separator: str = "\n\n"
    templates: Templates
    generation_prompt: str = ""
    """Literal text that opens the assistant's turn."""
    separator: str = ""
    """Literal text between rendered messages."""
    stop: list[str] = Field(default_factory=list)
    special_tokens: list[str] = Field(default_factory=list)
    """Control tokens of the format (for neutralising them in documents)."""
    user_alignment_message: str = ""
    """When set, a user message with this text is inserted if the first non-system message
    is not from the user (SillyTavern's `user_alignment_message`)."""
    alternate_roles: bool = False
    """The family requires user/assistant turns to alternate (Mistral, Gemma): consecutive
    messages of one role are merged, and a conversation that cannot alternate is a 400."""
    merge_separator: str = "\n\n"
    """Between the texts of merged consecutive messages."""
    tool_convention: ToolConvention = "json"
    tool_mode: ToolMode = "native"

    @model_validator(mode="after")
    def _check_templates(self) -> InstructFormat:
        for role, template in self.templates.all():
            for source in template.sources():
                _validate_template(self.name, role, source)
        if any(not s for s in self.stop):
            raise ValueError("stop strings must not be empty")
        return self

    @property
    def special_stops(self) -> list[str]:
        """Stop strings that are control tokens: a server that strips special tokens from
        its output text (vLLM's skip_special_tokens) will never match them."""
        return [s for s in self.stop if s in self.special_tokens or s == self.eos]


def _validate_template(fmt_name: str, role: str, source: str) -> None:
    where = f"format {fmt_name!r}, {role} template"
    try:
        compile_template(source)
        for name in ("", "Ann"):
            out = render_template(source, content=_MARK, role=role, name=name)
            if _MARK not in out:
                raise TemplateRejected("the template must render {{ content }}")
            render_template(source, content="  {{ 7*7 }} {% for %}\n", role=role, name=name)
    except TemplateRejected as exc:
        raise TemplateRejected(f"{where}: {exc.message}") from exc
    except Exception as exc:  # any runtime failure is refused here, never at request time
        raise TemplateRejected(f"{where}: test rendering failed: {exc}") from exc
