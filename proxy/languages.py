"""The languages the proxy tells apart in documents and questions, by their English names."""

from __future__ import annotations

LANGUAGE_NAMES = {
    "english": "English",
    "german": "German",
    "french": "French",
    "spanish": "Spanish",
    "italian": "Italian",
    "portuguese": "Portuguese",
    "dutch": "Dutch",
    "russian": "Russian",
    "swedish": "Swedish",
    "danish": "Danish",
    "norwegian": "Norwegian",
    "turkish": "Turkish",
}
"""The languages the lexical index tells apart (proxy.retrieval.function_words), by their
English names."""
