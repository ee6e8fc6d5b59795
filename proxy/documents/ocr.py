"""Whether OCR can run here: Tesseract's language data (PyMuPDF carries the engine itself)."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from proxy.documents.job import OcrOptions

Enabled = Literal["auto", "true", "false"]
_SEARCH = (
    "/usr/share/tesseract-ocr/*/tessdata",
    "/usr/share/tesseract-ocr/tessdata",
    "/usr/share/tessdata",
    "/usr/local/share/tessdata",
    "/opt/homebrew/share/tessdata",
)
ENABLE_HINT = (
    "install Tesseract's language data (Debian/Ubuntu: apt-get install tesseract-ocr,"
    " plus tesseract-ocr-<lang> for other languages) and set documents.ocr.enabled to auto"
)


@dataclass(frozen=True)
class OcrStatus:
    """What the proxy will do about pages without text: `options` is None when OCR is off."""

    options: OcrOptions | None
    reason: str

    @property
    def on(self) -> bool:
        return self.options is not None

    def describe(self) -> str:
        if self.options is None:
            return f"off ({self.reason})"
        return f"on ({self.options.language}, {self.options.dpi} dpi, {self.options.tessdata})"


class OcrUnavailable(Exception):
    """`documents.ocr.enabled: true` but the engine's data is missing."""


def find_tessdata(languages: Sequence[str], search: Sequence[str] = _SEARCH) -> tuple[str, str]:
    """The folder holding every language's `.traineddata`, or "" and what is missing."""
    candidates = [os.environ.get("TESSDATA_PREFIX", "")]
    for pattern in search:
        candidates.extend(sorted(glob.glob(pattern), reverse=True))
    folders = [folder for folder in candidates if folder and Path(folder).is_dir()]
    best_missing: list[str] = list(languages)
    for folder in folders:
        missing = [
            lang for lang in languages if not (Path(folder) / f"{lang}.traineddata").is_file()
        ]
        if not missing:
            return folder, ""
        if len(missing) < len(best_missing):
            best_missing = missing
    if not folders:
        return "", f"Tesseract language data not found (none for {', '.join(languages)})"
    return "", f"no Tesseract language data for {', '.join(best_missing)} in {', '.join(folders)}"


def ocr_status(
    enabled: Enabled | bool,
    languages: Sequence[str],
    dpi: int,
    max_pages: int,
    search: Sequence[str] = _SEARCH,
) -> OcrStatus:
    """Resolve `documents.ocr`; raises OcrUnavailable when OCR is required but cannot run."""
    setting = str(enabled).lower()
    if setting == "false":
        return OcrStatus(None, "documents.ocr.enabled is false")
    folder, missing = find_tessdata(languages, search)
    if not folder:
        if setting == "true":
            raise OcrUnavailable(f"documents.ocr.enabled is true but {missing}; {ENABLE_HINT}")
        return OcrStatus(None, missing)
    return OcrStatus(OcrOptions(tuple(languages), dpi, max_pages, folder), "")
