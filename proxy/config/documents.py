"""documents and guard: how documents are referenced, parsed, bounded, cached and guarded."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from proxy.config.base import Section


class OcrSettings(Section):
    enabled: Literal["auto"] | bool = Field(
        "auto",
        description=(
            "auto: on when Tesseract's language data is installed | true: required | false."
        ),
    )
    languages: list[str] = Field(
        default_factory=lambda: ["eng"],
        min_length=1,
        description="Tesseract codes, each needs tesseract-ocr-<code>: [eng, deu, chi_sim].",
    )
    dpi: int = Field(
        300,
        ge=72,
        le=600,
        description="Resolution pages are rendered at for OCR.",
    )
    max_pages: int = Field(
        50,
        ge=0,
        description="Pages OCR'd per document; further scanned pages stay empty (warned).",
    )
    page_timeout_s: float = Field(
        30,
        gt=0,
        description="Each OCR'd page adds this to parse_timeout_s.",
    )

    @field_validator("languages")
    @classmethod
    def _language_codes(cls, value: list[str]) -> list[str]:
        for code in value:
            if not code or not all(c.isascii() and (c.isalnum() or c == "_") for c in code):
                raise ValueError(f"{code!r} is not a Tesseract language code (eng, deu, chi_sim)")
        return value


class DocumentSettings(Section):
    roots: dict[str, Path] = Field(
        default_factory=dict,
        description='Named roots for path references, e.g. {docs: /srv/docs} → "#file:docs/a.pdf".',
    )
    reference_prefix: str = Field(
        "#file:",
        description=(
            'How a path reference starts in message text ("#file:docs/a.pdf"); only with roots.'
        ),
    )
    max_file_mb: float = Field(
        50,
        gt=0,
        description="Size of one document (uploads, file_data, paths) → 413.",
    )
    max_pages: int = Field(
        2000,
        ge=1,
        description="Pages per document → 400 too_many_pages.",
    )
    max_chars: int = Field(
        5_000_000,
        ge=1,
        description="Extracted characters per document → 400 too_much_text.",
    )
    max_files_per_request: int = Field(
        20,
        ge=1,
        description="Documents (new and old) one chat request may reference → 400.",
    )
    max_request_chars: int = Field(
        10_000_000,
        ge=1,
        description="Extracted characters of all of a request's documents → 400.",
    )
    max_request_mb: float = Field(
        256,
        gt=0,
        description="Bytes of a request's documents (each file once), before reading → 413.",
    )
    max_inflight_mb_per_key: float = Field(
        512,
        gt=0,
        description="Document bytes one key's requests read at once → 429.",
    )
    parse_timeout_s: float = Field(
        60,
        gt=0,
        description="Per document; the parser process is killed → 400 parse_timeout.",
    )
    parse_workers: int = Field(
        2,
        ge=1,
        description="Parser processes (PyMuPDF is not thread-safe).",
    )
    parse_workers_per_key: int | None = Field(
        None,
        ge=1,
        description=(
            "Parser processes one key's documents may hold at once; null = all but one with "
            "server.api_keys (at least one), all without (every caller is then one identity)."
        ),
    )
    cache_max_mb: float = Field(
        2048,
        gt=0,
        description="Parsed-text cache on disk; least recently used entries go first.",
    )
    pdf_tables: bool = Field(
        True,
        description="PDF pages with ruling lines: tables found and kept as Markdown tables.",
    )
    max_sheet_rows: int = Field(
        5000,
        ge=1,
        description="Rows read per sheet / CSV file; more are cut, with a warning.",
    )
    max_sheet_columns: int = Field(
        100,
        ge=1,
        description="Columns read per sheet; more are cut, with a warning.",
    )
    worker_recycle_mb: float = Field(
        1024,
        gt=0,
        description="A parser process holding more memory than this after a job is replaced.",
    )
    ocr: OcrSettings = Field(
        default_factory=OcrSettings,
        description="Reading scanned pages and images sent as documents (Tesseract).",
    )
    allowed_url_prefixes: list[str] = Field(
        default_factory=list,
        description=(
            "input_file parts with a file_url are fetched only under these, e.g. "
            '["https://intranet.example/docs/"]; none (the default): every file_url is a 400.'
        ),
    )
    url_timeout_s: float = Field(
        30,
        gt=0,
        description="The whole fetch of a file_url → 400 file_url_timeout.",
    )

    @field_validator("allowed_url_prefixes")
    @classmethod
    def _http_prefixes(cls, value: list[str]) -> list[str]:
        for prefix in value:
            if not prefix.startswith(("http://", "https://")):
                raise ValueError(f"{prefix!r} must start with http:// or https://")
        return value


class GuardSettings(Section):
    redact_overrides: bool = Field(
        False,
        description='Also redact "ignore all previous instructions"-style phrases.',
    )
