"""The errors of the vector store routes, as OpenAI's API words them."""

from __future__ import annotations

from proxy.errors import ProxyError


class StoreNotFound(ProxyError):
    """No such store, or another key's (404 either way: ids never tell whose they are)."""

    status = 404

    def __init__(self, store_id: str) -> None:
        super().__init__(
            f"no such vector store: {store_id!r}",
            param="vector_store_id",
            code="vector_store_not_found",
        )


class StoreFileNotFound(ProxyError):
    status = 404

    def __init__(self, store_id: str, file_id: str) -> None:
        super().__init__(
            f"no file {file_id!r} in vector store {store_id!r}",
            param="file_id",
            code="file_not_found",
        )


class BatchNotFound(ProxyError):
    status = 404

    def __init__(self, store_id: str, batch_id: str) -> None:
        super().__init__(
            f"no file batch {batch_id!r} in vector store {store_id!r}",
            param="batch_id",
            code="batch_not_found",
        )


class StoreExpired(ProxyError):
    """The store expired (`expires_after`): it can be read and deleted, not used."""

    def __init__(self, store_id: str) -> None:
        super().__init__(
            f"vector store {store_id!r} has expired (expires_after): it can still be read and"
            " deleted, not searched or added to",
            param="vector_store_id",
            code="vector_store_expired",
        )


class TooManyChunkings(ProxyError):
    """An upload indexed with as many chunking strategies as it may have: another one would be
    another whole index of it (vector_stores.max_chunkings_per_file)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"this upload is indexed with {limit} chunking strategies already, as many as"
            f" vector_stores.max_chunkings_per_file ({limit}) allows: attach it with one of"
            " those, or delete it and upload it again",
            param="chunking_strategy",
            code="too_many_chunking_strategies",
        )
