"""Inside the image (its own Python, as its user): wait for /healthz, then ask about a PDF.

    python image_check_ask.py wait ok|degraded SECONDS
    python image_check_ask.py ask

Run by scripts/image-check; standard library and PyMuPDF (in the image) only.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request

BASE = f"http://127.0.0.1:{os.environ.get('PROXY__SERVER__PORT', '8000')}"
PAGES = (
    "The lighthouse keeper fed the cats every morning with fresh sardines.",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
    "The bakery on the corner sells sourdough bread and croissants at dawn.",
)


def health() -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(BASE + "/healthz", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def wait(expect: str, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    seen: object = "no answer"
    while time.monotonic() < deadline:
        try:
            status, body = health()
        except OSError as error:
            seen = error
        else:
            seen = (status, body)
            if body.get("status") == expect and body.get("proxy") == "ok":
                print(f"/healthz {status}: {json.dumps(body)}")
                return 0
        time.sleep(1)
    print(f"/healthz never said {expect}; last: {seen}", file=sys.stderr)
    return 1


def book() -> bytes:
    import pymupdf

    document = pymupdf.open()
    for text in PAGES:
        document.new_page().insert_textbox(pymupdf.Rect(50, 50, 550, 800), text)
    data: bytes = document.tobytes()
    return data


def ask() -> int:
    pdf = base64.b64encode(book()).decode()
    body = {
        "model": "any",
        "max_tokens": 60,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What did the lighthouse keeper feed the cats?"},
                    {
                        "type": "file",
                        "file": {
                            "filename": "book.pdf",
                            "file_data": f"data:application/pdf;base64,{pdf}",
                        },
                    },
                ],
            }
        ],
    }
    request = urllib.request.Request(
        BASE + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "X-Enrich-Strategy": "retrieval",
            "X-Enrich-Citations": "both",
        },
    )
    with urllib.request.urlopen(request, timeout=900) as response:
        headers = dict(response.headers)
        answer = json.loads(response.read())
    content = answer["choices"][0]["message"]["content"]
    print(f"strategy {headers.get('X-Enrich-Strategy')}, citations {answer.get('citations')}")
    print(f"model {answer.get('model')!r}; answer: {content!r}")
    if "book.pdf#page=1" not in (answer.get("citations") or []):
        print("the page that answers was not cited", file=sys.stderr)
        return 1
    if "Sources:\n- book.pdf, page" not in content:
        print("no Sources block in the answer", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["wait"]:
        sys.exit(wait(sys.argv[2], float(sys.argv[3])))
    sys.exit(ask())
