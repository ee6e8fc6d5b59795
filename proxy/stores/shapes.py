"""Vector stores, their files and batches in the shapes of OpenAI's API (pure)."""

from __future__ import annotations

from typing import Any

from proxy.stores.records import (
    BatchRecord,
    FileRecord,
    StoreRecord,
    batch_status,
    file_counts,
    store_status,
)


def store_object(store: StoreRecord, files: list[FileRecord], now: float) -> dict[str, Any]:
    return {
        "id": store.id,
        "object": "vector_store",
        "created_at": store.created_at,
        "name": store.name,
        "description": store.description,
        "usage_bytes": sum(f.usage_bytes for f in files if f.status == "completed"),
        "file_counts": file_counts(files),
        "status": store_status(store, files, now),
        "expires_after": store.expires_after.model_dump() if store.expires_after else None,
        "expires_at": store.expires_at(),
        "last_active_at": store.last_active_at,
        "metadata": store.metadata,
    }


def file_object(record: FileRecord, default_tokens: int, default_overlap: int) -> dict[str, Any]:
    """The file as OpenAI shows it; an `auto` chunking reports the sizes it stands for, as
    OpenAI's does (a `static` strategy)."""
    tokens, overlap = record.chunking.sizes(default_tokens, default_overlap)
    return {
        "id": record.id,
        "object": "vector_store.file",
        "created_at": record.created_at,
        "vector_store_id": record.store_id,
        "status": record.status,
        "usage_bytes": record.usage_bytes if record.status == "completed" else 0,
        "last_error": record.last_error.model_dump() if record.last_error else None,
        "attributes": record.attributes,
        "chunking_strategy": {
            "type": "static",
            "static": {"max_chunk_size_tokens": tokens, "chunk_overlap_tokens": overlap},
        },
    }


def batch_object(batch: BatchRecord, files: list[FileRecord]) -> dict[str, Any]:
    return {
        "id": batch.id,
        "object": "vector_store.files_batch",
        "created_at": batch.created_at,
        "vector_store_id": batch.store_id,
        "status": batch_status(batch, files),
        "file_counts": file_counts(files),
    }


def deleted(object_id: str, kind: str) -> dict[str, Any]:
    return {"id": object_id, "object": f"{kind}.deleted", "deleted": True}


def list_page(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }
