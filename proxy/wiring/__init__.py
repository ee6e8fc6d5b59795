"""Every edge of one proxy process made once from its settings; every public name is here."""

from proxy.wiring.build import (
    build_services,
    chat_tokens,
    make_embedder_from,
    make_formats,
    make_multilingual,
    make_parser,
    make_retriever,
    ocr_of,
    parse_workers_per_key,
    start_local_upstream,
)
from proxy.wiring.files import (
    make_files,
    make_object_store,
    make_owners,
    make_shared_cache,
    make_vector_stores,
    replica_name,
    start_file_sweep,
)
from proxy.wiring.folders import data_dir, disk_room

__all__ = [
    "build_services",
    "chat_tokens",
    "data_dir",
    "disk_room",
    "make_embedder_from",
    "make_files",
    "make_formats",
    "make_multilingual",
    "make_object_store",
    "make_owners",
    "make_parser",
    "make_retriever",
    "make_shared_cache",
    "make_vector_stores",
    "ocr_of",
    "parse_workers_per_key",
    "replica_name",
    "start_file_sweep",
    "start_local_upstream",
]
