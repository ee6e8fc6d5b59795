"""The formats the proxy reads and the library that reads each: shared by detection and readers."""

from __future__ import annotations

from enum import StrEnum
from pathlib import PurePath


class Kind(StrEnum):
    """A format we can parse; the value is the PyMuPDF filetype for the PyMuPDF kinds."""

    PDF = "pdf"
    XPS = "xps"
    EPUB = "epub"
    MOBI = "mobi"
    FB2 = "fb2"
    CBZ = "cbz"
    IMAGE = "image"
    DOCX = "docx"
    ODT = "odt"
    RTF = "rtf"
    HTML = "html"
    XLSX = "xlsx"
    XLS = "xls"
    ODS = "ods"
    PPTX = "pptx"
    ODP = "odp"
    TEXT = "text"
    MARKDOWN = "markdown"
    CSV = "csv"
    JSON = "json"
    CODE = "code"


MUPDF_KINDS = frozenset({Kind.PDF, Kind.XPS, Kind.MOBI, Kind.FB2, Kind.CBZ, Kind.IMAGE})
PAGED_KINDS = MUPDF_KINDS | {Kind.PPTX, Kind.ODP}
"""Formats whose units are pages or slides of their own, counted against `max_pages`."""
TEXT_KINDS = frozenset({Kind.TEXT, Kind.MARKDOWN, Kind.CSV, Kind.JSON, Kind.CODE})
"""Decoded in a thread of the main process: no native parser, linear in the input."""

LIBRARY = {
    **{kind: "PyMuPDF" for kind in MUPDF_KINDS},
    Kind.IMAGE: "PyMuPDF",
    Kind.EPUB: "selectolax",
    Kind.DOCX: "python-docx",
    Kind.ODT: "odfpy",
    Kind.ODS: "odfpy",
    Kind.ODP: "odfpy",
    Kind.RTF: "striprtf",
    Kind.HTML: "selectolax",
    Kind.XLSX: "openpyxl",
    Kind.XLS: "xlrd",
    Kind.PPTX: "python-pptx",
    **{kind: "text" for kind in TEXT_KINDS},
    Kind.CSV: "csv",
}

CODE_LANGUAGES = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript",
    ".cjs": "javascript", ".jsx": "jsx", ".ts": "typescript", ".tsx": "tsx", ".java": "java",
    ".kt": "kotlin", ".scala": "scala", ".go": "go", ".rs": "rust", ".c": "c", ".h": "c",
    ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".cs": "csharp",
    ".swift": "swift", ".m": "objectivec", ".rb": "ruby", ".php": "php", ".pl": "perl",
    ".lua": "lua", ".r": "r", ".jl": "julia", ".sh": "bash", ".bash": "bash", ".zsh": "zsh",
    ".ps1": "powershell", ".sql": "sql", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml",
    ".ini": "ini", ".cfg": "ini", ".xml": "xml", ".css": "css", ".scss": "scss",
    ".proto": "protobuf", ".dockerfile": "dockerfile", ".tf": "hcl", ".hs": "haskell",
    ".ex": "elixir", ".exs": "elixir", ".erl": "erlang", ".clj": "clojure", ".dart": "dart",
    ".vue": "vue", ".svelte": "svelte", ".gradle": "groovy", ".groovy": "groovy",
}  # fmt: skip
CODE_NAMES = {"dockerfile": "dockerfile", "makefile": "makefile", "jenkinsfile": "groovy"}


def code_language(name: str) -> str:
    path = PurePath(name)
    return CODE_NAMES.get(path.name.lower()) or CODE_LANGUAGES.get(path.suffix.lower(), "")
