"""How far tiktoken's estimate is from a model's own token count, on the shared corpus.

Servers that publish no tokenizer (Ollama, LM Studio, hosted APIs) are counted with tiktoken's
cl100k_base; where such a server cuts a prompt over its window without a word, the estimate is
raised by `upstream.estimate_margin`. This prints, per document, the model's own count (asked
of a llama.cpp `/tokenize` or llama-cpp-python `/extras/tokenize/count`) over cl100k's:
above 1, the estimate fell short.

    python bench/token_estimates.py --upstream http://127.0.0.1:8080 [--api llamacpp]
    python bench/token_estimates.py --upstream http://127.0.0.1:8000 --api llama-cpp-python
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import httpx
import pymupdf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.corpus import add_corpus_option, corpus_or_exit
from proxy.upstream.encodings import load_encoding

DOCUMENTS = [
    "pdf/tracemonkey.pdf",
    "pdf/freeculture.pdf",
    "pdf/GeoTopo-komprimiert.pdf",
    "pdf/multicolumn.pdf",
    "pdf/chinese-tables.pdf",
    "pdf/habibi.pdf",
    "epub/alice.epub",
    "html/wikipedia-mozilla.html",
    "html/hukumusume-ja.html",
    "text/tinyshakespeare.txt",
    "text/readability-README.md",
]
PIECE = 8_000  # characters per request: the servers take texts this long comfortably


def text_of(path: Path) -> str:
    if path.suffix in (".txt", ".md"):
        return path.read_text(encoding="utf-8", errors="replace")
    with pymupdf.open(path) as document:
        return "".join(page.get_text() for page in document)


def count(client: httpx.Client, api: str, text: str) -> int:
    total = 0
    for start in range(0, len(text), PIECE):
        piece = text[start : start + PIECE]
        if api == "llamacpp":
            answer = client.post("/tokenize", json={"content": piece, "add_special": False})
            total += len(answer.json()["tokens"])
        else:
            answer = client.post("/extras/tokenize/count", json={"input": piece})
            total += answer.json()["count"]
    return total


def main(upstream: str, api: str, limit: int, corpus: Path) -> None:
    encoding = load_encoding("cl100k_base")
    print(f"{'document':<34}{'chars':>9}{'cl100k':>9}{'model':>9}{'model/cl100k':>14}")
    worst = 0.0
    with httpx.Client(base_url=upstream, timeout=120) as client:
        for name in DOCUMENTS:
            text = text_of(corpus / name)[:limit]
            estimate = len(encoding.encode_ordinary(text))
            own = count(client, api, text)
            ratio = own / estimate if estimate else 0.0
            worst = max(worst, ratio)
            print(f"{name:<34}{len(text):>9}{estimate:>9}{own:>9}{ratio:>14.3f}")
    print(f"largest model/cl100k: {worst:.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--api", choices=["llamacpp", "llama-cpp-python"], default="llamacpp")
    parser.add_argument("--limit", type=int, default=200_000, help="characters per document")
    add_corpus_option(parser)
    args = parser.parse_args()
    main(args.upstream, args.api, args.limit, corpus_or_exit(args.corpus))
