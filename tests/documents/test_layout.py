"""Who loads what: the parse worker loads the readers and no pool or cache code, the proxy
process loads no parser library, and the package faces import nothing."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import proxy.documents.readers

ROOT = Path(__file__).resolve().parents[2]
PARSER_LIBRARIES = ("pymupdf", "fitz", "selectolax", "docx", "pptx", "openpyxl", "xlrd", "lxml")
SHARED = {"failure", "job", "formats", "model", "framing"}
"""Modules of proxy.documents both sides use: what a reader gets and gives, and the framing."""


def loaded_by(*modules: str) -> list[str]:
    """The modules a fresh interpreter holds after importing `modules` (as the worker starts)."""
    script = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        f"for name in {list(modules)!r}: __import__(name)\n"
        "import json; print(json.dumps(sorted(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    loaded: list[str] = json.loads(result.stdout)
    return loaded


def parent_side(loaded: list[str]) -> list[str]:
    """proxy.documents modules that are neither readers nor shared with the worker."""
    prefix = "proxy.documents."
    return [
        name
        for name in loaded
        if name.startswith(prefix)
        and not name.startswith(prefix + "readers")
        and name.removeprefix(prefix) not in SHARED
    ]


def test_the_package_faces_import_nothing() -> None:
    loaded = loaded_by("proxy.documents", "proxy.documents.readers")
    assert [name for name in loaded if name.startswith("proxy.")] == [
        "proxy.documents",
        "proxy.documents.readers",
    ]
    assert not [name for name in PARSER_LIBRARIES if name in loaded]


def test_the_worker_loads_no_pool_cache_or_parent_code() -> None:
    loaded = loaded_by("proxy.documents.readers.worker")
    assert "proxy.documents.readers.pdf" in loaded  # the readers are loaded up front
    assert "pymupdf" in loaded
    assert parent_side(loaded) == []


def test_no_reader_reaches_up_to_the_parent_side() -> None:
    readers = [
        f"proxy.documents.readers.{module.name}"
        for module in pkgutil.iter_modules(proxy.documents.readers.__path__)
    ]
    assert "proxy.documents.readers.worker" in readers
    assert parent_side(loaded_by(*readers)) == []


def test_the_proxy_process_loads_no_parser_library() -> None:
    # The parent detects, pools and caches; only its workers open documents.
    loaded = loaded_by("proxy.serve", "proxy.wiring")
    assert "proxy.documents.page_images" in loaded
    assert "proxy.documents.parser" in loaded
    assert [name for name in PARSER_LIBRARIES if name in loaded] == []
