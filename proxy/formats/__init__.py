"""Instruct formats: render a clean message array into a prompt for text-completion upstreams."""

from proxy.formats.adapter import ChatStreamConverter, chat_completion_from, completion_request
from proxy.formats.model import PRESET_VERSION, InstructFormat, RoleTemplate, Templates
from proxy.formats.presets import (
    FormatRegistry,
    PresetError,
    builtin_presets,
    export_preset,
    import_any,
    import_preset,
    import_sillytavern,
    migrate,
)
from proxy.formats.render import message_text, render_prompt, resolve_macros
from proxy.formats.sandbox import OutputTooLarge, RenderLimits, TemplateRejected
from proxy.formats.shift import ContextOverflow, ShiftResult, shift_context

__all__ = [
    "PRESET_VERSION",
    "ChatStreamConverter",
    "ContextOverflow",
    "FormatRegistry",
    "InstructFormat",
    "OutputTooLarge",
    "PresetError",
    "RenderLimits",
    "RoleTemplate",
    "ShiftResult",
    "TemplateRejected",
    "Templates",
    "builtin_presets",
    "chat_completion_from",
    "completion_request",
    "export_preset",
    "import_any",
    "import_preset",
    "import_sillytavern",
    "message_text",
    "migrate",
    "render_prompt",
    "resolve_macros",
    "shift_context",
]
