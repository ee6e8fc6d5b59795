"""MiniLM's two builds: Chroma's fp32 ONNX file as shipped, and an int8 build made from it here."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import structlog

log = structlog.get_logger(__name__)

Precision = Literal["auto", "int8", "fp32"]
Build = Literal["int8", "fp32"]

INT8_RECIPE = "int8-v1"
"""Names the int8 recipe below: in the build's file name and in the embedder's fingerprint, so
that a changed recipe makes a new build and indexes documents again."""

INT8_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
"""x86 instructions that multiply 8-bit integers into 32-bit sums in one step. Without them
ONNX Runtime's u8s8 kernels go through 16-bit intermediate sums that can saturate (the reason
for its `reduce_range` option), and int8 gains little: such machines keep fp32."""

MIN_COSINE = 0.95
"""A build is kept only if each probe's vector is at least this close to fp32's. The recipe
below gives 0.966 ("ok") to 0.994 on the probes, 0.984 to 0.999 on real passages; a broken
build lands far lower (per-tensor weights: 0.85 on a probe)."""

PROBES = (
    "What did the court decide about the home video recorder?",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little money in my "
    "purse, I thought I would sail about a little and see the watery part of the world.",
    "The tracing JIT records a loop's hot path as a trace tree and compiles it to native code.",
    "Die Fundamentalgruppe eines wegzusammenhängenden Raumes hängt nicht vom Basispunkt ab.",
    "Table 3: latency p50 3.4 ms, p99 12.1 ms; throughput 4,770 req/s at concurrency 32.",
    "[Section 4.2] The client MUST send the bearer token in the Authorization header.",
    "ok",
    "",
)
"""Texts every new build embeds next to fp32 before it is kept: prose, code words, German,
numbers, a heading, a word, nothing."""

Vectors = npt.NDArray[np.float32]


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The CPU feature flags listed in a /proc/cpuinfo text (x86 `flags`, Arm `Features`)."""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return frozenset(flags)


def machine_flags() -> frozenset[str]:
    """This machine's CPU flags; none where /proc/cpuinfo is not there to read."""
    try:
        return cpu_flags(Path("/proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        return frozenset()


def choose_build(precision: Precision, flags: frozenset[str]) -> Build:
    """`int8` or `fp32` as configured; `auto`: int8 where the CPU multiplies 8-bit integers in
    one instruction (AVX-512 VNNI, AVX-VNNI, AMX), fp32 elsewhere (Arm included: not measured
    here, so it keeps the vectors it always had)."""
    if precision != "auto":
        return precision
    return "int8" if flags & INT8_FLAGS else "fp32"


def vectors_of(session: Any, tokenizer: Any, texts: Sequence[str]) -> Vectors:
    """Unit vectors of `texts`, as Chroma makes them: attention-weighted mean of the last hidden
    states. The tokenizer pads to the batch's longest text (masked out of the mean)."""
    encoded = tokenizer.encode_batch(list(texts))
    ids = np.array([e.ids for e in encoded], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
    inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    hidden = session.run(None, inputs)[0]
    weights = mask[..., None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
    result: Vectors = pooled.astype(np.float32)
    return result


def lowest_cosine(reference: Any, candidate: Any, tokenizer: Any) -> float:
    """How close two sessions' vectors are: the lowest cosine over the probe texts."""
    ours = vectors_of(reference, tokenizer, PROBES)
    theirs = vectors_of(candidate, tokenizer, PROBES)
    return float((ours * theirs).sum(axis=1).min())


class Int8BuildError(RuntimeError):
    """The int8 build could not be made, or gave vectors too far from fp32's."""


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def int8_name(source_digest: str) -> str:
    """The build's file name: the recipe and the source model's digest, so either changing
    makes another file (and the old one is removed when the new one is kept)."""
    return f"model.{INT8_RECIPE}.{source_digest[:16]}.onnx"


def without_nan_guards(model: Any) -> int:
    """Drop `Where(IsNaN(x), 0, x)` after each attention softmax; returns how many were dropped.

    PyTorch's exporter guards rows whose every key is masked (softmax of all -inf is NaN). A
    MiniLM input never has one: every row attends to [CLS], which is never padding; so the
    guard is a no-op that scans every attention matrix twice, ~18% of an int8 run (measured
    with ONNX Runtime's profiler). ONNX Runtime's optimizers keep it, so it goes here.
    """
    nodes = list(model.graph.node)
    made_by = {output: i for i, node in enumerate(nodes) for output in node.output}
    dropped: set[int] = set()
    renamed: dict[str, str] = {}
    for i, node in enumerate(nodes):
        if node.op_type != "Where" or len(node.input) != 3 or node.input[0] not in made_by:
            continue
        test = made_by[node.input[0]]
        if nodes[test].op_type == "IsNaN" and nodes[test].input[0] == node.input[2]:
            dropped.update((i, test))
            renamed[node.output[0]] = node.input[2]
    if not dropped:
        return 0
    graph_outputs = {output.name for output in model.graph.output}
    if graph_outputs & set(renamed):
        return 0  # a guard on the model's own output: leave the graph as it is
    kept = [node for i, node in enumerate(nodes) if i not in dropped]
    for node in kept:
        for k, name in enumerate(node.input):
            node.input[k] = renamed.get(name, name)
    # The guards' zeros are left unused: ONNX Runtime warns about each one at every load.
    used = {name for node in kept for name in node.input} | graph_outputs
    unused = {name for i in dropped for name in nodes[i].input} - used
    kept = [
        node for node in kept if not (node.op_type == "Constant" and set(node.output) <= unused)
    ]
    initializers = [i for i in model.graph.initializer if i.name not in unused]
    del model.graph.initializer[:]
    model.graph.initializer.extend(initializers)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return len(dropped) // 2


def quantize(source: Path, target: Path) -> None:
    """Write the int8 build of `source` to `target` with ONNX Runtime's dynamic quantization.

    Chosen by measurement (bench/indexing.py --agreement, on real passages): weights int8 per
    channel (per-tensor: cosine to fp32 down to 0.86, median 0.94; per channel: 0.984 and
    0.994), activations quantized per run (dynamic: no calibration set to keep); every
    MatMul and the embedding tables quantized (keeping the feed-forward outputs in fp32 gains
    0.003 of cosine for 30% more time); QInt8 weights (QUInt8: median 0.976, slower with VNNI).
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(source))
    without_nan_guards(model)
    # The tool advises its pre-processing step on the root logger: measured, it changes
    # nothing here (ONNX Runtime's session optimizations do the same at load).
    quiet = logging.getLogger()
    hush = _Hush("Please consider to run pre-processing")
    quiet.addFilter(hush)
    try:
        quantize_dynamic(model, target, weight_type=QuantType.QInt8, per_channel=True)
    finally:
        quiet.removeFilter(hush)


class _Hush(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def build_int8(
    source: Path,
    agreement: Callable[[Path], float],
    *,
    folder: Path | None = None,
) -> tuple[Path, bool]:
    """The int8 build of `source`: the one kept beside it before, else made now, checked with
    `agreement(path)` (the lowest cosine of its probe vectors to fp32's) and written atomically.

    Returns the build's path and whether it is kept (False: the folder is not writable, the
    build is a private temporary file the caller removes once loaded).
    """
    folder = folder or source.parent
    target = folder / int8_name(file_digest(source))
    if target.exists():
        return target, True
    started = time.perf_counter()
    try:
        descriptor, name = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".partial", dir=folder
        )
        kept = True
    except OSError as error:
        log.warning(
            "model folder not writable: int8 build made for this process only",
            folder=str(folder),
            error=str(error),
        )
        private = Path(tempfile.mkdtemp(prefix="minilm-int8-"))
        descriptor, name = tempfile.mkstemp(suffix=".onnx", dir=private)
        kept = False
    os.close(descriptor)
    partial = Path(name)
    try:
        quantize(source, partial)
        lowest = agreement(partial)
        if lowest < MIN_COSINE:
            raise Int8BuildError(
                f"int8 build of {source.name}: a probe's cosine to fp32 is {lowest:.3f}"
                f" (at least {MIN_COSINE} expected); set embeddings.precision: fp32"
            )
        if not kept:
            return partial, False
        partial.chmod(0o644)  # as readable as the model beside it (mkstemp made it 0600)
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        if not kept:
            discard_private(partial)
        raise
    _remove_stale(folder, keep=target.name)
    log.info(
        "int8 embedding model built",
        file=str(target),
        seconds=round(time.perf_counter() - started, 1),
        cosine_min=round(lowest, 4),
    )
    return target, True


def discard_private(path: Path) -> None:
    """Remove a build made for this process only, and its private folder."""
    with contextlib.suppress(OSError):
        path.unlink()
    with contextlib.suppress(OSError):
        path.parent.rmdir()


def _remove_stale(folder: Path, keep: str) -> None:
    """Earlier builds (another recipe or source), and partial files left by a crash an hour ago."""
    now = time.time()
    for path in folder.glob("model.int8-*.onnx"):
        if path.name != keep:
            with contextlib.suppress(OSError):
                path.unlink()
    for path in folder.glob(".model.int8-*.partial"):
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime > 3600:
                path.unlink()
