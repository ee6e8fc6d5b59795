"""Model files fetched on first use (tiktoken's, Chroma's): which file is missing, and where
it goes on a machine that cannot fetch it — said only when fetching it is what failed."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from proxy.errors import ProxyError

# tiktoken's own download addresses (tiktoken_ext/openai_public.py).
TIKTOKEN_URLS = {
    name: f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
    for name in ("cl100k_base", "o200k_base", "p50k_base", "r50k_base")
}


TIKTOKEN_VARIABLES = ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")


def settle_tiktoken_cache() -> None:
    """With neither variable set, tiktoken looks in a temporary folder: have it look in
    ~/.cache/tiktoken instead, the folder the README names and where offline installs put its
    files — unless only the temporary folder holds files already."""
    if any(variable in os.environ for variable in TIKTOKEN_VARIABLES):
        return
    home = Path.home() / ".cache" / "tiktoken"
    default = Path(tempfile.gettempdir()) / "data-gym-cache"
    if _holds_files(default) and not _holds_files(home):
        return
    os.environ["TIKTOKEN_CACHE_DIR"] = str(home)


def _holds_files(folder: Path) -> bool:
    try:
        return any(folder.iterdir())
    except OSError:
        return False


def tiktoken_cache_dir() -> Path:
    """Where tiktoken keeps its files (tiktoken/load.py: read_file_cached)."""
    for variable in TIKTOKEN_VARIABLES:
        if variable in os.environ:
            return Path(os.environ[variable])
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def tiktoken_missing(name: str, error: BaseException) -> ProxyError:
    """tiktoken could not load `name`: the file it needs and where to put it."""
    url = TIKTOKEN_URLS.get(name)
    if url is None:
        where = f"its file in {tiktoken_cache_dir()} (TIKTOKEN_CACHE_DIR)"
    else:
        # tiktoken names the cached file after the SHA-1 of its address.
        key = hashlib.sha1(url.encode()).hexdigest()
        where = f"{url} at {tiktoken_cache_dir() / key} (the directory is TIKTOKEN_CACHE_DIR)"
    return ProxyError(
        f"tiktoken's {name} file is not cached and could not be downloaded "
        f"({error.__class__.__name__}); on a machine without internet access, put " + where,
        status=503,
        type="server_error",
        code="tokenizer_unavailable",
    )


def embedding_model_missing(folder: Path, url: str, error: BaseException) -> ProxyError:
    """Chroma's embedding model is not on disk and could not be downloaded."""
    return ProxyError(
        f"the embedding model all-MiniLM-L6-v2 is not in {folder} and could not be downloaded "
        f"({error.__class__.__name__}); on a machine without internet access, unpack "
        f"{url} into {folder.parent} (it holds onnx/model.onnx and the tokenizer's files), or "
        "use an embedding server (embeddings.backend: openai)",
        status=503,
        type="server_error",
        code="embedding_model_unavailable",
    )
