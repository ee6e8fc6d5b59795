"""llama-server command-line options mapped onto xllamacpp's `CommonParams` fields (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class EnumMember:
    """A member of one of xllamacpp's enums, named so this module needs no xllamacpp import."""

    enum: str
    member: str


Value = int | float | str | bool | list[str] | EnumMember
Assignment = tuple[str, Value]
"""A dotted attribute path on `CommonParams` (`cpuparams.n_threads`) and the value to set."""

Kind = Literal["flag", "int", "float", "str", "choice", "list", "append"]

# llama.cpp's `common_params_sampling_config` bits (common/common.h): a sampling option given on
# llama-server's command line sets its bit, and the model's own `general.sampling.*` metadata
# then leaves that field alone. Setting the field on CommonParams does not set the bit, so the
# xllamacpp backend sets it too: the command line wins over the GGUF on both backends.
SAMPLING_BITS = {
    "sampling.top_k": 1 << 1,
    "sampling.top_p": 1 << 2,
    "sampling.min_p": 1 << 3,
    "sampling.temp": 1 << 6,
    "sampling.penalty_repeat": 1 << 8,
}
SAMPLING_CONFIG = "sampling.user_sampling_config"


@dataclass(frozen=True)
class _Option:
    path: str
    kind: Kind
    constant: Value = True
    """What a flag sets."""
    choices: Mapping[str, Value] = field(default_factory=dict)


def _pooling(name: str) -> EnumMember:
    return EnumMember("llama_pooling_type", f"LLAMA_POOLING_TYPE_{name.upper()}")


def _flash(member: str) -> EnumMember:
    return EnumMember("llama_flash_attn_type", f"LLAMA_FLASH_ATTN_TYPE_{member}")


_ON_OFF = {"on": True, "off": False, "auto": False}

# The llama-server options a spawned server needs in practice, under llama-server's own names
# (common/arg.cpp), so `extra_args` reads the same for both backends. Anything else is refused
# by name rather than silently ignored: a server that ran with other settings than the user
# wrote would be worse than one that does not start.
_TABLE: dict[tuple[str, ...], _Option] = {
    ("-m", "--model"): _Option("model.path", "str"),
    ("-c", "--ctx-size"): _Option("n_ctx", "int"),
    ("--host",): _Option("hostnames", "list"),
    ("--port",): _Option("port", "int"),
    ("-np", "--parallel"): _Option("n_parallel", "int"),
    ("-t", "--threads"): _Option("cpuparams.n_threads", "int"),
    ("-tb", "--threads-batch"): _Option("cpuparams_batch.n_threads", "int"),
    ("--threads-http",): _Option("n_threads_http", "int"),
    ("-b", "--batch-size"): _Option("n_batch", "int"),
    ("-ub", "--ubatch-size"): _Option("n_ubatch", "int"),
    ("-ngl", "--gpu-layers", "--n-gpu-layers"): _Option("n_gpu_layers", "int"),
    ("--embedding", "--embeddings"): _Option("embedding", "flag"),
    ("--pooling",): _Option(
        "pooling_type",
        "choice",
        choices={n: _pooling(n) for n in ("none", "mean", "cls", "last", "rank")},
    ),
    ("-fa", "--flash-attn"): _Option(
        "flash_attn_type",
        "choice",
        choices={"on": _flash("ENABLED"), "off": _flash("DISABLED"), "auto": _flash("AUTO")},
    ),
    ("--chat-template",): _Option("chat_template", "str"),
    ("--jinja",): _Option("use_jinja", "flag"),
    ("--no-jinja",): _Option("use_jinja", "flag", constant=False),
    ("-nr", "--no-repack"): _Option("no_extra_bufts", "flag"),
    ("-a", "--alias"): _Option("model_alias", "list"),
    ("-n", "--predict", "--n-predict"): _Option("n_predict", "int"),
    # Each -r adds a stop string; a request's own `stop` replaces them all.
    ("-r", "--reverse-prompt"): _Option("antiprompt", "append"),
    ("-s", "--seed"): _Option("sampling.seed", "int"),
    ("--temp",): _Option("sampling.temp", "float"),
    ("--top-k",): _Option("sampling.top_k", "int"),
    ("--top-p",): _Option("sampling.top_p", "float"),
    ("--min-p",): _Option("sampling.min_p", "float"),
    ("--repeat-penalty",): _Option("sampling.penalty_repeat", "float"),
    ("--cache-prompt",): _Option("cache_prompt", "flag"),
    ("--no-cache-prompt",): _Option("cache_prompt", "flag", constant=False),
    ("--context-shift",): _Option("ctx_shift", "flag"),
    ("--no-context-shift",): _Option("ctx_shift", "flag", constant=False),
    ("-kvu", "--kv-unified"): _Option("kv_unified", "flag"),
    ("--no-kv-unified",): _Option("kv_unified", "flag", constant=False),
    ("--no-warmup",): _Option("warmup", "flag", constant=False),
    ("--webui", "--ui"): _Option("ui", "flag"),
    ("--no-webui", "--no-ui"): _Option("ui", "flag", constant=False),
    ("--metrics",): _Option("endpoint_metrics", "flag"),
    ("--props",): _Option("endpoint_props", "flag"),
    ("--slots",): _Option("endpoint_slots", "flag"),
    ("--no-slots",): _Option("endpoint_slots", "flag", constant=False),
    ("-to", "--timeout"): _Option("timeout_read", "int"),
    ("-lv", "--verbosity", "--log-verbosity"): _Option("verbosity", "int"),
    ("--log-colors",): _Option("use_color", "choice", choices=_ON_OFF),
}
OPTIONS: dict[str, _Option] = {name: opt for names, opt in _TABLE.items() for name in names}
"""Every llama-server option the xllamacpp backend accepts, by each of its spellings."""


class UnsupportedOptions(ValueError):
    """Options the xllamacpp backend cannot honour; the message names each of them."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        super().__init__(
            f"llama-server option(s) not supported by the xllamacpp backend: "
            f"{', '.join(self.names)} (supported: {', '.join(sorted(OPTIONS))}; "
            f"or use upstream.spawn.backend: binary)"
        )


def _convert(name: str, option: _Option, raw: str) -> Value:
    try:
        if option.kind == "int":
            return int(raw)
        if option.kind == "float":
            return float(raw)
    except ValueError:
        raise ValueError(f"option {name} needs a number, not {raw!r}") from None
    if option.kind == "choice":
        if raw.lower() not in option.choices:
            raise ValueError(f"option {name} takes one of {', '.join(option.choices)}, not {raw!r}")
        return option.choices[raw.lower()]
    if option.kind in ("list", "append"):
        return [raw]
    return raw


def xllamacpp_assignments(args: Sequence[str]) -> list[Assignment]:
    """The `CommonParams` assignments that make xllamacpp run as `llama-server *args` would.

    Later options win, as on llama-server's command line. Raises UnsupportedOptions naming
    every option it does not know, and ValueError for a missing or malformed value.
    """
    out: list[Assignment] = []
    unknown: list[str] = []
    threads_batch_given = False
    i = 0
    while i < len(args):
        name = args[i]
        option = OPTIONS.get(name)
        i += 1
        if option is None:
            unknown.append(name)
            # Skip what is most likely its value, so only option names are reported.
            if name.startswith("-") and i < len(args) and not args[i].startswith("-"):
                i += 1
            continue
        if option.kind == "flag":
            out.append((option.path, option.constant))
            continue
        if i >= len(args):
            raise ValueError(f"option {name} needs a value")
        value = _convert(name, option, args[i])
        earlier = [n for n, (path, _) in enumerate(out) if path == option.path]
        if option.kind == "append" and earlier and isinstance(value, list):
            path, before = out.pop(earlier[-1])
            value = [*before, *value] if isinstance(before, list) else value
        out.append((option.path, value))
        threads_batch_given |= option.path == "cpuparams_batch.n_threads"
        i += 1
    if unknown:
        raise UnsupportedOptions(unknown)
    given = 0
    for path, _ in out:
        given |= SAMPLING_BITS.get(path, 0)
    if given:
        out.append((SAMPLING_CONFIG, given))
    # llama-server's -tb defaults to -t; CommonParams leaves it at -1 (all cores) otherwise.
    if not threads_batch_given:
        threads = [value for path, value in out if path == "cpuparams.n_threads"]
        if threads:
            out.append(("cpuparams_batch.n_threads", threads[-1]))
    return out
