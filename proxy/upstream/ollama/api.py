"""Reading Ollama's answers about a model (pure): /api/show, /api/ps, /api/version.

Shapes from ollama/ollama api/types.go (`ShowResponse`, `ProcessModelResponse`) and
server/routes.go (`ShowHandler` writes `model_info["<arch>.context_length"]` and `parameters`
as lines of `"%-30s %#v"`; `PsHandler` lists the loaded models with `context_length`, since
v0.10.0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

NUM_CTX_LINE = re.compile(r"^num_ctx\s+(\d+)\s*$", re.MULTILINE)
VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)")

# Before 0.6.7 Ollama ran a model with 2,048 tokens unless told otherwise; from then on with
# 4,096 (envconfig: "update default context length to 4096"), and from 0.15.5 with 4,096,
# 32,768 or 262,144 depending on the GPU's memory (server/routes.go "vram-based default
# context"). Nothing in the API says which: the smallest is what the proxy can count on.
DEFAULT_NUM_CTX_SINCE = ((0, 6, 7), 4096)
OLD_DEFAULT_NUM_CTX = 2048
# `truncate: false` on /api/chat (refuse, never cut) exists since 0.12.6 (PR #12582).
TRUNCATE_FIELD_SINCE = (0, 12, 6)


def version_tuple(version: str | None) -> tuple[int, int, int] | None:
    match = VERSION.match(version or "")
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


def default_num_ctx(version: str | None) -> int:
    """The smallest window Ollama of this version runs a model with when nobody sets one."""
    parsed = version_tuple(version)
    since, size = DEFAULT_NUM_CTX_SINCE
    if parsed is not None and parsed < since:
        return OLD_DEFAULT_NUM_CTX
    return size


def honours_truncate(version: str | None) -> bool:
    """Whether /api/chat takes `truncate: false` (an unknown version is assumed recent)."""
    parsed = version_tuple(version)
    return parsed is None or parsed >= TRUNCATE_FIELD_SINCE


def full_name(model: str) -> str:
    """`llama3.2` and `llama3.2:latest` are one model (Ollama's default tag is `latest`)."""
    last = model.rsplit("/", 1)[-1]
    return model if ":" in last else f"{model}:latest"


@dataclass(frozen=True)
class ShownModel:
    """What /api/show says of a model's window."""

    trained: int | None  # model_info["<arch>.context_length"]
    architecture: str | None
    modelfile_num_ctx: int | None  # PARAMETER num_ctx in its Modelfile


def read_show(body: Any) -> ShownModel:
    info = body.get("model_info") if isinstance(body, dict) else None
    info = info if isinstance(info, dict) else {}
    arch = info.get("general.architecture")
    trained = info.get(f"{arch}.context_length") if isinstance(arch, str) else None
    if not isinstance(trained, int):
        found = [v for k, v in info.items() if k.endswith(".context_length") and isinstance(v, int)]
        trained = found[0] if found else None
    if trained is None and isinstance(body, dict):
        details = body.get("details")
        if isinstance(details, dict) and isinstance(details.get("context_length"), int):
            trained = details["context_length"]
    parameters = body.get("parameters") if isinstance(body, dict) else None
    num_ctx = None
    if isinstance(parameters, str):
        match = NUM_CTX_LINE.search(parameters)
        num_ctx = int(match.group(1)) if match else None
    return ShownModel(
        trained if isinstance(trained, int) and trained > 0 else None,
        arch if isinstance(arch, str) else None,
        num_ctx,
    )


def loaded_context(body: Any, model: str) -> int | None:
    """The window /api/ps says `model` is loaded with; None when it is not loaded (or Ollama
    is older than 0.10.0 and does not say)."""
    models = body.get("models") if isinstance(body, dict) else None
    if not isinstance(models, list):
        return None
    wanted = full_name(model)
    for entry in models:
        if not isinstance(entry, dict):
            continue
        names = {full_name(str(entry.get(key))) for key in ("name", "model") if entry.get(key)}
        if wanted in names:
            size = entry.get("context_length")
            return size if isinstance(size, int) and size > 0 else None
    return None


PUBLIC_PROCESS_FIELDS = ("name", "model", "digest", "details")
"""What /api/ps says of a loaded model that no caller's request shaped: which model it is.
Its `context_length` (a window the proxy raised tells how long someone's prompt was), `size`
and `size_vram` (they grow with that window) and `expires_at` (when someone last asked) are
for an admin key only, as /healthz's windows."""


def public_processes(body: Any) -> dict[str, Any]:
    """/api/ps as a key that is not an admin's may read it."""
    models = body.get("models") if isinstance(body, dict) else None
    return {
        "models": [
            {key: entry[key] for key in PUBLIC_PROCESS_FIELDS if key in entry}
            for entry in (models if isinstance(models, list) else [])
            if isinstance(entry, dict)
        ]
    }
