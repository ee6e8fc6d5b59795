"""EPUB to Markdown: the spine's chapters in reading order, each titled from the table of contents.

Read with zipfile and lxml rather than EbookLib: EbookLib loads every item of the book (images
included) into memory up front; only the spine's XHTML is needed, under the archive's bounds.
"""

from __future__ import annotations

import posixpath
import zipfile
from typing import Any
from urllib.parse import unquote

from lxml import etree

from proxy.documents.failure import ExtractError
from proxy.documents.job import Job
from proxy.documents.readers.archive import open_zip
from proxy.documents.readers.html import html_to_text
from proxy.documents.readers.markdown_blocks import heading

# No entities, no DTDs, no network, no huge trees: the book is untrusted.
_PARSER = etree.XMLParser(
    resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False, recover=True
)


def epub_to_text(data: bytes, job: Job) -> str:
    with open_zip(data, "EPUB file", verify=True) as archive:
        try:
            return _book(archive, job)
        except (KeyError, etree.XMLSyntaxError, zipfile.BadZipFile, ValueError) as exc:
            raise ExtractError(f"is not a readable EPUB file ({exc})", "corrupt_document") from exc


def _xml(archive: zipfile.ZipFile, path: str) -> Any:
    root = etree.fromstring(archive.read(path), _PARSER)
    if root is None:
        raise ValueError(f"{path} is empty")
    return root


def _local(element: Any) -> str:
    tag = element.tag
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _book(archive: zipfile.ZipFile, job: Job) -> str:
    container = _xml(archive, "META-INF/container.xml")
    rootfile = next((e.get("full-path") for e in container.iter() if _local(e) == "rootfile"), None)
    if not rootfile:
        raise ValueError("no rootfile in META-INF/container.xml")
    opf = _xml(archive, rootfile)
    base = posixpath.dirname(rootfile)
    title = next((e.text for e in opf.iter() if _local(e) == "title" and e.text), None)
    job.title(title)
    manifest: dict[str, tuple[str, str, str]] = {}
    for item in opf.iter():
        if _local(item) == "item" and item.get("id") and item.get("href"):
            path = posixpath.normpath(posixpath.join(base, unquote(item.get("href"))))
            manifest[item.get("id")] = (
                path,
                item.get("media-type", ""),
                item.get("properties", ""),
            )
    spine = [e.get("idref") for e in opf.iter() if _local(e) == "itemref"]
    labels = _toc_labels(archive, manifest, opf)
    chapters: list[str] = []
    for idref in spine:
        if idref not in manifest:
            continue
        path, media, _ = manifest[idref]
        if "html" not in media and not path.endswith((".xhtml", ".html", ".htm")):
            continue
        try:
            text = html_to_text(archive.read(path))
        except KeyError:
            continue
        label = labels.get(path)
        if label and text and not text.lstrip().startswith("#"):
            text = heading(1, label) + "\n\n" + text
        if text:
            chapters.append(text)
    return "\n\n".join(chapters)


def _toc_labels(
    archive: zipfile.ZipFile, manifest: dict[str, tuple[str, str, str]], opf: Any
) -> dict[str, str]:
    """Chapter file → its first title in the table of contents (EPUB 3 nav or EPUB 2 NCX)."""
    labels: dict[str, str] = {}
    for path, media, properties in manifest.values():
        is_nav = "nav" in properties.split()
        if not is_nav and media != "application/x-dtbncx+xml":
            continue
        try:
            root = _xml(archive, path)
        except (KeyError, etree.XMLSyntaxError, ValueError):
            continue
        base = posixpath.dirname(path)
        for element in root.iter():
            name = _local(element)
            if is_nav and name == "a" and element.get("href"):
                _label(labels, base, element.get("href"), "".join(element.itertext()))
            elif name == "navPoint":
                text = next((e for e in element.iter() if _local(e) == "text"), None)
                src = next((e.get("src") for e in element.iter() if _local(e) == "content"), None)
                if text is not None and src:
                    _label(labels, base, src, "".join(text.itertext()))
    return labels


def _label(labels: dict[str, str], base: str, href: str, text: str) -> None:
    target = posixpath.normpath(posixpath.join(base, unquote(href.split("#", 1)[0])))
    text = " ".join(text.split())
    if text and target not in labels:
        labels[target] = text
