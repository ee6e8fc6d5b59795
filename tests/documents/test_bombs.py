"""ZIP bombs: nothing is inflated unbounded in the main process, nor blindly in a worker."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import docx
import pytest

from proxy.documents.detect import detect
from proxy.documents.parser import DocumentParser
from proxy.documents.readers.archive import MAX_ENTRIES
from proxy.errors import DocumentError
from tests.documents.zipbombs import crowded_docx, deflated_zeros, raw_zip, small

ROOT = Path(__file__).resolve().parents[2]
GIB = 1024


def _peak_rss_of_detect(path: Path) -> dict[str, object]:
    """detect() on the file's bytes in a fresh interpreter: its outcome and peak memory (MB)."""
    script = f"""
import json, resource, sys
sys.path.insert(0, {str(ROOT)!r})
from proxy.documents.detect import detect
from proxy.errors import DocumentError
data = open({str(path)!r}, "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    outcome = str(detect("bomb.epub", data))
except DocumentError as error:
    outcome = error.code
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"outcome": outcome, "grew_mb": (after - before) / 1024}}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def gib_of_zeros() -> bytes:
    return deflated_zeros(GIB)


def test_a_mimetype_that_expands_to_a_gib_is_refused_without_inflating_it(
    tmp_path: Path, gib_of_zeros: bytes
) -> None:
    bomb = tmp_path / "bomb.epub"
    bomb.write_bytes(raw_zip([("mimetype", gib_of_zeros, GIB * 1024 * 1024, 0)]))
    result = _peak_rss_of_detect(bomb)
    assert result["outcome"] == "document_too_large"
    assert float(str(result["grew_mb"])) < 64


def test_a_mimetype_that_lies_about_its_size_is_read_a_few_bytes_only(
    tmp_path: Path, gib_of_zeros: bytes
) -> None:
    # Declared as 64 bytes, inflating to 1 GiB: zipfile's read() would inflate all of it.
    bomb = tmp_path / "liar.epub"
    bomb.write_bytes(
        raw_zip([("mimetype", gib_of_zeros, 64, 0), small("META-INF/container.xml", b"<c/>")])
    )
    result = _peak_rss_of_detect(bomb)
    assert float(str(result["grew_mb"])) < 64
    assert result["outcome"] == "corrupt_document"  # its 64 bytes fail their checksum


def _docx_parts() -> dict[str, bytes]:
    document = docx.Document()
    document.add_paragraph("an ordinary paragraph")
    buffer = io.BytesIO()
    document.save(buffer)
    with zipfile.ZipFile(buffer) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


async def test_a_docx_member_that_lies_about_its_size_is_refused_in_the_worker(
    tmp_path: Path, gib_of_zeros: bytes
) -> None:
    parts = _docx_parts()
    members = [small(name, data) for name, data in parts.items() if name != "word/document.xml"]
    members.append(("word/document.xml", gib_of_zeros, len(parts["word/document.xml"]), 0))
    bomb = raw_zip(members)
    assert detect("bomb.docx", bomb) == "docx"
    parser = DocumentParser(tmp_path, workers=1)
    try:
        with pytest.raises(DocumentError, match="inflates past its declared size") as caught:
            await parser.parse("bomb.docx", bomb)
        assert caught.value.code == "document_too_large"
    finally:
        await parser.close()


def test_an_honest_bomb_is_refused_by_its_ratio(gib_of_zeros: bytes) -> None:
    parts = _docx_parts()
    members = [small(name, data) for name, data in parts.items() if name != "word/document.xml"]
    members.append(("word/document.xml", gib_of_zeros, 300 * 1024 * 1024, 0))
    with pytest.raises(DocumentError, match="zip bomb") as caught:
        detect("bomb.docx", raw_zip(members))
    assert caught.value.code == "document_too_large"


def test_too_many_entries_are_refused_before_the_directory_is_read() -> None:
    members = [small(f"f{n}.txt", b"x") for n in range(MAX_ENTRIES + 1)]
    with pytest.raises(DocumentError, match="too many entries") as caught:
        detect("many.docx", raw_zip(members))
    assert caught.value.code == "document_too_large"


def test_a_zip64_end_record_is_read_for_the_entry_count() -> None:
    # The plain end record claims one entry; the ZIP64 one, which zipfile reads instead,
    # lists 50,000 (the had 700,000): refused from the record, before zipfile lists them.
    with pytest.raises(DocumentError, match=r"too many entries \(50000") as caught:
        detect("crowded.docx", crowded_docx(50_000, zip64=True))
    assert caught.value.code == "document_too_large"


def test_entries_are_counted_in_the_directory_whatever_the_end_record_says() -> None:
    # zipfile reads the directory by its size and ignores the declared count of 100.
    crowded = crowded_docx(MAX_ENTRIES + 1, zip64=False, declared=100)
    with pytest.raises(DocumentError, match=f"more than {MAX_ENTRIES}") as caught:
        detect("crowded.docx", crowded)
    assert caught.value.code == "document_too_large"
    for zip64 in (True, False):  # within the limit, either record: an ordinary DOCX
        assert detect("fine.docx", crowded_docx(MAX_ENTRIES, zip64=zip64)) == "docx"


def test_compression_methods_that_inflate_unbounded_are_refused() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_BZIP2) as archive:
        archive.writestr("word/document.xml", b"<w:document/>")
    with pytest.raises(DocumentError, match="compression method") as caught:
        detect("b.docx", buffer.getvalue())
    assert caught.value.code == "unsupported_format"
