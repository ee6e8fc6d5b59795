"""MiniLM's builds: which one a CPU gets, the int8 build made once and checked, and its vectors."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from proxy.config import load_settings
from proxy.retrieval import embeddings, minilm
from proxy.retrieval.embeddings import DefaultEmbedder
from proxy.retrieval.minilm import (
    INT8_RECIPE,
    Int8BuildError,
    build_int8,
    choose_build,
    cpu_flags,
    int8_name,
    without_nan_guards,
)
from proxy.wiring import make_embedder_from
from tests.retrieval.support import corpus_document

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"

X86 = """processor\t: 0
vendor_id\t: AuthenticAMD
flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_vnni avx512_bf16
processor\t: 1
flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_vnni avx512_bf16
"""
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes crc32 asimddp i8mm\n"


def test_the_cpu_flags_are_read_from_cpuinfo() -> None:
    assert "avx512_vnni" in cpu_flags(X86) and "avx2" in cpu_flags(X86)
    assert "asimddp" in cpu_flags(ARM)
    assert cpu_flags("") == frozenset()


@pytest.mark.parametrize(
    ("precision", "flags", "build"),
    [
        ("auto", {"avx2", "avx512_vnni"}, "int8"),
        ("auto", {"avx2", "avx_vnni"}, "int8"),  # Alder Lake and later: VNNI on AVX2
        ("auto", {"avx2", "amx_int8"}, "int8"),
        ("auto", {"avx2", "avx512f", "avx512bw"}, "fp32"),  # AVX-512 without VNNI
        ("auto", {"sse2", "avx2", "fma"}, "fp32"),
        ("auto", {"asimd", "asimddp", "i8mm"}, "fp32"),  # Arm: not measured here
        ("auto", set(), "fp32"),  # no /proc/cpuinfo
        ("int8", set(), "int8"),
        ("fp32", {"avx512_vnni"}, "fp32"),
    ],
)
def test_the_build_follows_the_cpu_unless_configured(
    precision: minilm.Precision, flags: set[str], build: str
) -> None:
    assert choose_build(precision, frozenset(flags)) == build


def test_auto_reads_this_machines_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embeddings, "machine_flags", lambda: cpu_flags(X86))
    assert DefaultEmbedder().precision == "int8"
    monkeypatch.setattr(embeddings, "machine_flags", lambda: cpu_flags(ARM))
    assert DefaultEmbedder().precision == "fp32"


def test_the_fingerprint_names_the_int8_build_and_fp32_keeps_its_own() -> None:
    # fp32 keeps the fingerprint indexes were made with before builds existed: still valid.
    assert DefaultEmbedder(precision="fp32").fingerprint == "default-all-MiniLM-L6-v2"
    int8 = DefaultEmbedder(precision="int8")
    assert int8.fingerprint == f"default-all-MiniLM-L6-v2|{INT8_RECIPE}"
    assert int8.name == DefaultEmbedder(precision="fp32").name  # one collection


def test_the_precision_is_a_setting(tmp_path: Path) -> None:
    settings = load_settings(None, environ={}, overrides={"embeddings": {"precision": "fp32"}})
    embedder = make_embedder_from(settings)
    assert isinstance(embedder, DefaultEmbedder) and embedder.precision == "fp32"
    settings = load_settings(None, environ={"PROXY__EMBEDDINGS__PRECISION": "int8"})
    embedder = make_embedder_from(settings)
    assert isinstance(embedder, DefaultEmbedder) and embedder.precision == "int8"
    with pytest.raises(Exception, match="precision"):
        load_settings(None, environ={}, overrides={"embeddings": {"precision": "int4"}})


# -- the build, on a small model of the same shape of graph ----------------------------------


def attention_like(path: Path, seed: int = 0) -> Path:
    """A tiny model: MatMul by a weight, softmax, PyTorch's NaN guard, MatMul again."""
    rng = np.random.default_rng(seed)
    weight = helper.make_tensor(
        "w", TensorProto.FLOAT, [16, 16], rng.standard_normal(256).astype(np.float32).tolist()
    )
    second = helper.make_tensor(
        "v", TensorProto.FLOAT, [16, 16], rng.standard_normal(256).astype(np.float32).tolist()
    )
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["scores"], name="q"),
        helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
        helper.make_node("IsNaN", ["probs"], ["nan"]),
        helper.make_node("Where", ["nan", "zero", "probs"], ["guarded"]),
        helper.make_node("MatMul", ["guarded", "v"], ["y"], name="out"),
    ]
    graph = helper.make_graph(
        nodes,
        "attention-like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
        [weight, second, zero],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def run(path: Path, x: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out: np.ndarray = session.run(None, {"x": x})[0]
    return out


def test_the_nan_guard_goes_and_the_outputs_stay(tmp_path: Path) -> None:
    source = attention_like(tmp_path / "model.onnx")
    model = onnx.load(str(source))
    assert without_nan_guards(model) == 1
    assert [node.op_type for node in model.graph.node] == ["MatMul", "Softmax", "MatMul"]
    assert model.graph.node[2].input[0] == "probs"
    assert [tensor.name for tensor in model.graph.initializer] == ["w", "v"]  # the zero went
    onnx.save(model, str(tmp_path / "unguarded.onnx"))
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    assert np.array_equal(run(source, x), run(tmp_path / "unguarded.onnx", x))
    assert without_nan_guards(model) == 0  # nothing left to drop


def count_calls(result: float) -> tuple[list[Path], Callable[[Path], float]]:
    calls: list[Path] = []

    def agreement(path: Path) -> float:
        calls.append(path)
        assert path.exists()  # checked before it is kept
        return result

    return calls, agreement


def test_the_int8_build_is_made_once_beside_the_model_and_reused(tmp_path: Path) -> None:
    source = attention_like(tmp_path / "model.onnx")
    calls, agreement = count_calls(0.99)
    path, kept = build_int8(source, agreement)
    assert kept and path.parent == tmp_path
    assert path.name == int8_name(minilm.file_digest(source))
    assert path.name.startswith(f"model.{INT8_RECIPE}.") and path.stat().st_mode & 0o044
    ops = {node.op_type for node in onnx.load(str(path)).graph.node}
    assert "IsNaN" not in ops and ("MatMulInteger" in ops or "DynamicQuantizeMatMul" in ops)
    assert len(calls) == 1 and calls[0] != path  # checked as a partial file, then renamed
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["model.onnx", path.name])
    again, kept = build_int8(source, agreement)
    assert again == path and kept and len(calls) == 1  # reused, not made or checked again
    x = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    assert run(path, x).shape == (3, 16)


def test_a_changed_model_gets_a_new_build_and_the_old_one_goes(tmp_path: Path) -> None:
    source = attention_like(tmp_path / "model.onnx")
    _, agreement = count_calls(0.99)
    first, _ = build_int8(source, agreement)
    stale_partial = tmp_path / ".model.int8-v1.x.onnx.abc.partial"
    stale_partial.write_bytes(b"left by a crash")
    os.utime(stale_partial, (0, 0))
    attention_like(source, seed=1)  # the model was replaced (another Chroma version)
    second, _ = build_int8(source, agreement)
    assert second != first and second.exists() and not first.exists()
    assert not stale_partial.exists()


def test_a_build_far_from_fp32_is_refused_and_nothing_is_kept(tmp_path: Path) -> None:
    source = attention_like(tmp_path / "model.onnx")
    _, agreement = count_calls(0.5)
    with pytest.raises(Int8BuildError, match=r"cosine to fp32 is 0\.500.*precision: fp32"):
        build_int8(source, agreement)
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_model_folder_gets_a_private_build(tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    source = attention_like(folder / "model.onnx")
    folder.chmod(0o555)
    try:
        _, agreement = count_calls(0.99)
        path, kept = build_int8(source, agreement)
        assert not kept and path.parent != folder and path.exists()
        minilm.discard_private(path)
        assert not path.parent.exists()
    finally:
        folder.chmod(0o755)


def test_a_folder_that_refuses_the_build_gets_a_private_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As root the folder cannot be made read-only: mkstemp is refused there instead.
    source = attention_like(tmp_path / "model.onnx")
    real = tempfile.mkstemp

    def refuse_beside(suffix: str = "", prefix: str = "tmp", dir: Path | None = None) -> Any:
        if dir == tmp_path:
            raise PermissionError(13, "Permission denied")
        return real(suffix, prefix, dir)

    monkeypatch.setattr(tempfile, "mkstemp", refuse_beside)
    _, agreement = count_calls(0.99)
    path, kept = build_int8(source, agreement)
    assert not kept and path.parent != tmp_path and path.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]
    minilm.discard_private(path)
    assert not path.parent.exists()


# -- the real model ----------------------------------------------------------------------------


def minilm_folder() -> Path:
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    function = ONNXMiniLM_L6_V2()
    function(["load"])
    return Path(function.DOWNLOAD_PATH) / function.EXTRACTED_FOLDER_NAME


@pytest.mark.slow
async def test_the_int8_build_of_minilm_is_made_where_chroma_keeps_it_and_loads_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # A copy of Chroma's folder, so that this test builds for itself.
    folder = tmp_path / "onnx"
    shutil.copytree(minilm_folder(), folder, ignore=shutil.ignore_patterns("*model.int8-*"))
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    monkeypatch.setattr(ONNXMiniLM_L6_V2, "DOWNLOAD_PATH", tmp_path)
    monkeypatch.setattr(ONNXMiniLM_L6_V2, "EXTRACTED_FOLDER_NAME", "onnx")
    embedder = DefaultEmbedder(precision="int8")
    vector = await embedder.embed_query("where is the lighthouse?")
    # Checking the fresh build against fp32 loads it before its unused constants are pruned:
    # ONNX Runtime's warnings about them (a screenful) must not reach the proxy's log.
    assert capfd.readouterr().err == ""
    built = list(folder.glob(f"model.{INT8_RECIPE}.*.onnx"))
    assert len(built) == 1 and len(vector) == 384
    graph = onnx.load(str(built[0])).graph
    used = {name for node in graph.node for name in node.input}
    unused = [
        n.output[0] for n in graph.node if n.op_type == "Constant" and n.output[0] not in used
    ]
    assert not unused  # nothing for ONNX Runtime to warn about at each load
    assert built[0].stat().st_size < (folder / "model.onnx").stat().st_size / 3
    built[0].write_bytes(b"damaged")  # a damaged build is made again
    again = DefaultEmbedder(precision="int8")
    assert np.allclose(await again.embed_query("where is the lighthouse?"), vector, atol=1e-6)
    assert built[0].stat().st_size > 1000


@pytest.mark.slow
@pytest.mark.skipif(not CORPUS.exists(), reason="../shared/corpus is absent")
async def test_int8_vectors_stay_close_to_fp32_and_rank_the_same_on_real_passages() -> None:
    from proxy.retrieval.chunking import chunk_document

    fp32 = DefaultEmbedder(precision="fp32")
    int8 = DefaultEmbedder(precision="int8")
    doc = corpus_document(CORPUS / "pdf" / "tracemonkey.pdf")
    texts = [chunk.text for chunk in chunk_document(doc, count_tokens=fp32.count_tokens)]
    questions = [
        "How does the tracing JIT handle nested loops?",
        "What speedup does TraceMonkey reach on the SunSpider benchmarks?",
        "Why are type-unstable loops a problem for trace compilation?",
        "How are side exits from a trace handled?",
    ]
    a, b = await asyncio.gather(fp32.embed_documents(texts), int8.embed_documents(texts))
    ours, theirs = np.asarray(a), np.asarray(b)
    cosines = (ours * theirs).sum(axis=1)
    assert cosines.min() > 0.97 and np.median(cosines) > 0.99
    for question in questions:
        q32 = np.asarray(await fp32.embed_query(question))
        q8 = np.asarray(await int8.embed_query(question))
        top32 = list(np.argsort(-(ours @ q32))[:5])
        top8 = list(np.argsort(-(theirs @ q8))[:5])
        # Near-ties may swap (0.776 against 0.773 measured); the places found stay.
        assert top8[0] in top32[:2] and len(set(top32) & set(top8)) >= 4


async def test_loading_the_int8_build_writes_nothing_on_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # ONNX Runtime warns once per constant the quantizer left unused: a screenful at each start.
    embedder = DefaultEmbedder(precision="int8")
    await embedder.embed_query("where is the lighthouse?")  # built (or found) and loaded
    capfd.readouterr()
    loaded = DefaultEmbedder(precision="int8")
    assert len(await loaded.embed_query("where is the lighthouse?")) == 384
    assert capfd.readouterr().err == ""


async def test_another_precision_embeds_documents_again_in_place(tmp_path: Path) -> None:
    from proxy.retrieval.index import VectorIndex
    from proxy.retrieval.retriever import Retriever
    from tests.retrieval.support import CountingEmbedder, text_document

    doc = text_document([f"Page {n} is about the harbour and its {n} ships." for n in range(12)])

    def retriever(precision: minilm.Build) -> Retriever:
        embedder = CountingEmbedder(DefaultEmbedder(precision=precision))
        return Retriever(
            index=VectorIndex.embedded(tmp_path / "chroma", embedder),
            embedder=embedder,
            count_tokens=embedder.count_tokens,
            chunk_tokens=16,
            chunk_overlap=0,
            passages_dir=tmp_path / "passages",
        )

    before = retriever("fp32")
    assert before.settings.endswith(";embedder=default-all-MiniLM-L6-v2")  # as before builds
    assert await before.ensure_indexed(doc)
    count = len((await before.passages(doc)).chunks)
    await before.close()
    after = retriever("int8")
    assert after.settings.endswith(f";embedder=default-all-MiniLM-L6-v2|{INT8_RECIPE}")
    assert not await after.index.is_indexed(doc.sha256, after.settings)
    assert await after.ensure_indexed(doc)
    embedded = after.embedder
    assert isinstance(embedded, CountingEmbedder) and len(embedded.documents) == count
    assert not (await after.passages(doc)).fresh  # passages and BM25 read back, not made again
    chunks, _ = await after.index.call(after.index._collections)
    assert await after.index.call(chunks.count) == count  # replaced, not added beside
    client = after.index._client
    assert client is not None  # and no collection beside the one and its manifest:
    assert len(await after.index.call(client.list_collections)) == 2
    await after.close()


@pytest.mark.parametrize("build", ["fp32", "int8"])
async def test_a_passages_vector_does_not_depend_on_what_is_embedded_with_it_or_before(
    build: minilm.Build,
) -> None:
    # The same document indexed by two processes, or resumed after a crash, or with its
    # passages reordered by the questions asked, gets the same vectors: one passage per model
    # run (the default) leaves no padding and no shared int8 activation scale between texts,
    # and runs side by side on the lanes share nothing. Tolerance: none (bit for bit).
    text = "The lighthouse keeper counted forty-two ships in the harbour that winter."
    others = [
        "ok",
        "A much longer passage about whaling, the Pequod, its crew and the white whale " * 12,
        "Die Fundamentalgruppe eines wegzusammenhängenden Raumes hängt nicht vom Basispunkt ab.",
    ]
    alone = np.asarray(await DefaultEmbedder(precision=build, lanes=1).embed_documents([text]))
    embedder = DefaultEmbedder(precision=build, lanes=2)
    await embedder.embed_documents(others)  # run before it
    among = await embedder.embed_documents([others[1], text, others[0], others[2]])
    after = await embedder.embed_documents([text])
    # in the background and on a request's lanes at the same time, among other passages
    behind, beside = await asyncio.gather(
        embedder.embed_in_background([*others, text, *others]),
        embedder.embed_documents([others[2], text]),
    )
    assert np.array_equal(np.asarray(among[1:2]), alone)
    assert np.array_equal(np.asarray(after), alone)
    assert np.array_equal(np.asarray(behind[3:4]), alone)
    assert np.array_equal(np.asarray(beside[1:2]), alone)
    await embedder.close()
