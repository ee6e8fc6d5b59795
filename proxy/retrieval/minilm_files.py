"""Chroma's MiniLM files on disk: whether they are all there, and their one fetch, at start-up in
a thread of its own (never on a request: Chroma itself would download them there)."""

from __future__ import annotations

import asyncio
import fcntl
import threading
import time
from pathlib import Path

import structlog

from proxy.errors import ProxyError
from proxy.offline import embedding_model_missing

log = structlog.get_logger(__name__)

URL = "https://chroma-onnx-models.s3.amazonaws.com/all-MiniLM-L6-v2/onnx.tar.gz"
"""The archive Chroma downloads (ONNXMiniLM_L6_V2.MODEL_DOWNLOAD_URL; sha256-checked by it)."""
FILES = (
    "config.json",
    "model.onnx",
    "special_tokens_map.json",
    "tokenizer_config.json",
    "tokenizer.json",
    "vocab.txt",
)
"""What Chroma checks for before it downloads (`_download_model_if_not_exists`)."""
FETCH_TIMEOUT_S = 300.0
"""How long start-up waits for the fetch before it says the model could not be had: the archive
is ~80 MB (Chroma's client gives up on a silent connection after 5 s by itself)."""


def chroma_folder(home: Path | None = None) -> Path:
    """Where Chroma keeps the model (ONNXMiniLM_L6_V2.DOWNLOAD_PATH / EXTRACTED_FOLDER_NAME),
    without importing chromadb (~2 s)."""
    base = home or Path.home()
    return base / ".cache" / "chroma" / "onnx_models" / "all-MiniLM-L6-v2" / "onnx"


class MiniLMFiles:
    """The model's files in one folder: present, missing, or being fetched by this process."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.failure: str | None = None
        """Why the last fetch failed or is late (None: none did)."""
        self._thread: threading.Thread | None = None

    @property
    def fetching(self) -> bool:
        """A fetch is under way (its files may be half-written until it ends)."""
        return self._thread is not None and self._thread.is_alive()

    def missing(self) -> list[str]:
        return [name for name in FILES if not (self.folder / name).is_file()]

    def unavailable(self) -> ProxyError | None:
        """Why the model cannot be used now (fast, no network), or None when it can."""
        if self.fetching:
            reason = self.failure or "it is being fetched since the proxy started: ask again soon"
            return embedding_model_missing(self.folder, URL, reason)
        missing = self.missing()
        if not missing:
            return None
        reason = self.failure or "it was not fetched at start-up"
        return embedding_model_missing(self.folder, URL, f"{missing[0]} is missing; {reason}")

    def require(self) -> None:
        error = self.unavailable()
        if error is not None:
            raise error

    def fetch(self) -> None:
        """Fetch and unpack the model with Chroma's own code if a file is missing. Blocking, and
        the network's time: only ever in a thread of its own. Processes sharing the folder (the
        workers) take turns: the first fetches, the others find the files."""
        from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

        self.folder.parent.mkdir(parents=True, exist_ok=True)
        with (self.folder.parent / ".fetch.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if self.missing():
                    function = ONNXMiniLM_L6_V2()
                    function.DOWNLOAD_PATH = self.folder.parent
                    function._download_model_if_not_exists()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _fetch_logged(self) -> None:
        started = time.monotonic()
        try:
            self.fetch()
        except Exception as error:  # whatever Chroma's HTTP client or the disk raises
            self.failure = f"fetching it at start-up failed: {type(error).__name__}"
            log.warning(embedding_model_missing(self.folder, URL, self.failure).message)
        else:
            self.failure = None
            log.info(
                "embedding model fetched",
                folder=str(self.folder),
                seconds=round(time.monotonic() - started, 1),
            )

    async def fetch_at_start(self, timeout_s: float = FETCH_TIMEOUT_S) -> None:
        """Fetch the model if it is missing, in a daemon thread (a resolver that never answers
        holds it, not the loop nor the process's exit); after `timeout_s` say it could not be
        had. A fetch that ends later still puts the files in place for the next question."""
        if not await asyncio.to_thread(self.missing):
            return
        log.info("fetching the embedding model", url=URL, folder=str(self.folder))
        thread = threading.Thread(target=self._fetch_logged, name="minilm-fetch", daemon=True)
        self._thread = thread
        thread.start()
        deadline = time.monotonic() + timeout_s
        while thread.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        if thread.is_alive():
            self.failure = f"its fetch, begun at start-up, had no answer within {timeout_s:g} s"
            log.warning(embedding_model_missing(self.folder, URL, self.failure).message)


_by_folder: dict[Path, MiniLMFiles] = {}
_by_folder_lock = threading.Lock()


def minilm_files(folder: Path | None = None) -> MiniLMFiles:
    """The process's one record of the files in `folder` (default: Chroma's)."""
    folder = folder or chroma_folder()
    with _by_folder_lock:
        if folder not in _by_folder:
            _by_folder[folder] = MiniLMFiles(folder)
        return _by_folder[folder]


__all__ = ["FETCH_TIMEOUT_S", "FILES", "URL", "MiniLMFiles", "chroma_folder", "minilm_files"]
