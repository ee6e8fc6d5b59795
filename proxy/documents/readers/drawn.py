"""In the parse worker: which pages carry what their text does not (figures, charts, images,
scans), and those pages rendered as PNG or JPEG images, bounded in pixels, bytes and time."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from typing import Any

from proxy.documents.failure import ExtractError
from proxy.documents.model import DrawnPage
from proxy.documents.readers.pdf import _mupdf

Send = Callable[[dict[str, Any]], None]

FIGURE_SHARE = 0.03
"""A figure counts when its vector graphics cover at least this share of the page (3%: a small
chart in one column of a two-column paper covers 8-25%; a rule under a heading, or a logo, far
less). Measured on the corpus: see docs/vision.md."""
FIGURE_ITEMS = 3
"""...and it is drawn with at least this many graphic strokes (curves, slanted lines, filled
shapes; a bar chart may draw all its bars as one path of rectangles): a box around an abstract
or a highlighted word is one or two."""
IMAGE_SHARE = 0.03
"""Raster images count from this share of the page (logos and icons stay below)."""
SCAN_SHARE = 0.85
"""An image covering this much of the page is the page: a scan (with or without an OCR layer)."""
LIGHT = 0.85
"""Fills lighter than this (luminance 0-1) are table shading or backgrounds, not graphics."""
_ALWAYS_IMAGES = frozenset({"cbz", "image"})


def _open(data: bytes, kind: str) -> Any:
    try:
        return _mupdf.open(stream=data, filetype=None if kind == "image" else kind)
    except Exception as exc:
        raise ExtractError(
            f"could not be opened to draw its pages ({exc})", "corrupt_document"
        ) from exc


def _luminance(color: Any) -> float:
    if not color:
        return 1.0
    values = [float(c) for c in color]
    if len(values) == 1:
        return values[0]
    if len(values) == 4:  # CMYK
        c, m, y, k = values
        return 1 - min(1.0, 0.3 * c + 0.59 * m + 0.11 * y + k)
    r, g, b = values[:3]
    return 0.299 * r + 0.587 * g + 0.114 * b


def _graphic(path: dict[str, Any]) -> bool:
    """A path that draws something (a curve, a slanted line, a filled shape) rather than a
    rule of a table or a box around text."""
    fill = path.get("fill")
    rect = path.get("rect")
    if fill is not None and rect is not None and _luminance(fill) < LIGHT:
        x0, y0, x1, y1 = rect
        if x1 - x0 >= 2 and y1 - y0 >= 2:
            return True
    for item in path.get("items", ()):
        op = item[0]
        if op in ("c", "qu"):
            return True
        if op == "l":
            (ax, ay), (bx, by) = item[1], item[2]
            if abs(ax - bx) > 0.5 and abs(ay - by) > 0.5:
                return True
    return False


def look(page: Any, kind: str, scanned: bool) -> DrawnPage | None:
    """What is drawn on one page, or None when its text says it all."""
    rect = page.rect
    area = abs(rect)
    if area <= 0:
        return None
    if kind in _ALWAYS_IMAGES:
        return DrawnPage(page.number + 1, rect.width, rect.height, "image", 1.0)
    image_area = 0.0
    for info in page.get_image_info():
        box = _mupdf.Rect(info["bbox"]) & rect
        image_area += abs(box)
    image_share = min(1.0, image_area / area)
    if image_share >= SCAN_SHARE or (scanned and image_share > 0):
        return DrawnPage(page.number + 1, rect.width, rect.height, "scan", round(image_share, 3))
    figure_share = 0.0
    if kind == "pdf":
        graphics = [
            {**path, "rect": _mupdf.Rect(path["rect"])}
            for path in page.get_cdrawings()
            if _graphic(path)
        ]
        if sum(len(path["items"]) for path in graphics) >= FIGURE_ITEMS:
            for box in page.cluster_drawings(drawings=graphics):
                figure_share += abs(_mupdf.Rect(box) & rect) / area
    figure_share = min(1.0, figure_share)
    if figure_share >= FIGURE_SHARE and figure_share >= image_share:
        reason = "figure"
    elif image_share >= IMAGE_SHARE:
        reason = "image"
    elif scanned and figure_share > 0:
        reason = "scan"
    else:
        return None
    share = round(min(1.0, image_share + figure_share), 3)
    return DrawnPage(page.number + 1, rect.width, rect.height, reason, share)


def survey(data: bytes, kind: str, scanned: set[int]) -> Iterator[DrawnPage]:
    """The drawn pages of a document, in order; `scanned`: pages without a text layer."""
    for _, _, found in looked(data, kind, scanned):
        if found is not None:
            yield found


def looked(
    data: bytes, kind: str, scanned: set[int]
) -> Iterator[tuple[int, int, DrawnPage | None]]:
    """Each page as it is looked at: its number, the page count, what is drawn on it (None:
    nothing)."""
    document = _open(data, kind)
    with document:
        count = document.page_count
        for index in range(count):
            try:
                page = document.load_page(index)
                found = look(page, kind, index + 1 in scanned)
            except Exception:
                found = None  # an unreadable page was skipped by the parse too
            yield index + 1, count, found


def survey_within(
    data: bytes, kind: str, scanned: set[int], budget_s: float | None
) -> tuple[list[DrawnPage], int | None]:
    """The drawn pages found within `budget_s` seconds, and the last page looked at when the
    time ran out before the end (None: every page was looked at). Stopping here, between two
    pages, keeps what was found; the parent's own time limit only catches a page that hangs."""
    started = time.monotonic()
    found: list[DrawnPage] = []
    for number, count, drawn in looked(data, kind, scanned):
        if drawn is not None:
            found.append(drawn)
        if number < count and budget_s is not None and time.monotonic() - started > budget_s:
            return found, number
    return found, None


def render(
    data: bytes, kind: str, wanted: list[list[Any]], max_bytes: int
) -> Iterator[dict[str, Any]]:
    """Each wanted page `[number, width, height, photo]` as an image message: PNG for drawings
    (sharp lines, small files), JPEG when it is smaller (photographs, scans) or the PNG is over
    `max_bytes`; scaled down until it fits, else left out."""
    document = _open(data, kind)
    with document:
        count = document.page_count
        for number, width, height, photo in wanted:
            if not 1 <= int(number) <= count:
                continue
            page = document.load_page(int(number) - 1)
            encoded = _encode(page, int(width), int(height), bool(photo), max_bytes)
            if encoded is None:
                yield {"t": "image", "n": int(number), "error": "over the size limit"}
                continue
            mime, raw, w, h = encoded
            yield {
                "t": "image",
                "n": int(number),
                "mime": mime,
                "w": w,
                "h": h,
                "bytes": len(raw),
                "b64": base64.b64encode(raw).decode("ascii"),
            }


def _encode(
    page: Any, width: int, height: int, photo: bool, max_bytes: int
) -> tuple[str, bytes, int, int] | None:
    rect = page.rect
    if rect.width <= 0 or rect.height <= 0 or width < 1 or height < 1:
        return None
    for _ in range(4):
        matrix = _mupdf.Matrix(width / rect.width, height / rect.height)
        pixmap = page.get_pixmap(matrix=matrix, alpha=False, colorspace=_mupdf.csRGB)
        choices = []
        if not photo:
            choices.append(("image/png", pixmap.tobytes("png")))
        if photo or len(choices[0][1]) > max_bytes // 2:
            choices.append(("image/jpeg", pixmap.tobytes("jpeg", jpg_quality=80)))
        mime, raw = min(choices, key=lambda choice: len(choice[1]))
        if len(raw) <= max_bytes:
            return mime, raw, pixmap.width, pixmap.height
        width, height = max(1, int(width * 0.7)), max(1, int(height * 0.7))
    return None


def run(spec: dict[str, Any], data: bytes, send: Send) -> None:
    """A worker job about pages as images: `survey` (which are drawn) or `render`."""
    kind = str(spec["kind"])
    if spec["task"] == "survey":
        scanned = {int(n) for n in spec.get("scanned", ())}
        budget = spec.get("budget_s")
        found, through = survey_within(
            data, kind, scanned, None if budget is None else float(budget)
        )
        message: dict[str, Any] = {"t": "drawn", "pages": [page.frame() for page in found]}
        if through is not None:
            message["through"] = through  # cut short: the pages after it were not looked at
        send(message)
    else:
        for message in render(data, kind, list(spec["pages"]), int(spec["max_bytes"])):
            send(message)
