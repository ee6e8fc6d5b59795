"""Model files that are not where they should be (tiktoken's, Chroma's): which file, where it was
looked for, and what to do, in one line."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from proxy.errors import ProxyError


def tiktoken_missing(name: str, url: str, looked: Sequence[Path]) -> ProxyError:
    """No place holds tiktoken's `name` file with the right sha256 (it ships with the proxy)."""
    shipped, *caches = looked
    elsewhere = ", ".join(str(path) for path in caches)
    return ProxyError(
        f"tiktoken's {name} file is missing: it ships with enrich-proxy at {shipped}, and "
        f"{elsewhere} hold no copy either; reinstall enrich-proxy (pip install --force-reinstall "
        f"enrich-proxy), or copy {url} to {caches[0]}",
        status=503,
        type="server_error",
        code="tokenizer_unavailable",
    )


def embedding_model_missing(folder: Path, url: str, reason: str) -> ProxyError:
    """Chroma's embedding model is not on disk (it is fetched at start-up, never on a request)."""
    return ProxyError(
        f"the embedding model all-MiniLM-L6-v2 is not in {folder} ({reason}); on a machine "
        f"without internet access, unpack {url} into {folder.parent} (it holds onnx/model.onnx "
        "and the tokenizer's files) and ask again, or use an embedding server "
        "(embeddings.backend: openai)",
        status=503,
        type="server_error",
        code="embedding_model_unavailable",
    )
