"""The S3-compatible object store every replica shares: one obstore client made from `files.*`,
its errors as the client should see them, and a start-up check of the conditional writes the
file store's correctness rests on."""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

import obstore
import structlog
from obstore.exceptions import AlreadyExistsError, BaseError, NotFoundError, PreconditionError
from obstore.store import S3Store

from proxy.config import ConfigError, FileStoreSettings
from proxy.errors import ProxyError

if TYPE_CHECKING:
    from obstore.store import ClientConfig

log = structlog.get_logger(__name__)

# Conditional writes the store must honour: a create that fails on an existing key
# (If-None-Match: *) and a replace that fails when the object changed (If-Match: ETag).
CONFLICTS = (AlreadyExistsError, PreconditionError)
# obstore reports a missing object as the builtin FileNotFoundError from some calls.
MISSING = (NotFoundError, FileNotFoundError)


class StoreUnavailable(ProxyError):
    """The object store failed (down, refused, timed out): 503, nothing half-done is visible.

    The caller learns what could not be done; the operator's log gets why. obstore's messages
    name the endpoint, the bucket and the object's key (an owner's path among them), which are
    the operator's business, not a caller's.
    """

    status = 503
    type = "server_error"

    def __init__(self, what: str, error: BaseException) -> None:
        detail = " ".join(str(error).split())[:1000] or type(error).__name__
        log.warning("object store failed", what=what, error=type(error).__name__, detail=detail)
        super().__init__(
            f"the proxy's object store could not {what}; try again (the proxy's log says why)",
            code="object_store_unavailable",
        )


def make_object_store(files: FileStoreSettings) -> S3Store:
    """An S3Store for `files.bucket` under `files.prefix`. Credentials come from the usual AWS
    chain as obstore reads it: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN,
    a web-identity token (Kubernetes), the ECS task role, else the EC2 instance profile."""
    if files.bucket is None:
        raise ConfigError("config key files.bucket: required with files.backend: s3")
    region = files.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    options: ClientConfig = {"timeout": "60s", "connect_timeout": "5s"}
    if files.endpoint_url and files.endpoint_url.startswith("http://"):
        options["allow_http"] = True
    return S3Store(
        files.bucket,
        prefix=files.prefix or None,
        endpoint=files.endpoint_url,
        region=region or "us-east-1",
        # Path-style addressing works with every S3-compatible server; AWS accepts it too.
        virtual_hosted_style_request=False,
        client_options=options,
        # Bounded retries: a request that keeps failing fails the client's request, not hangs.
        retry_config={"max_retries": 3, "retry_timeout": timedelta(seconds=20)},
    )


def check_conditional_writes(store: S3Store) -> None:
    """Refuse to start on a store that ignores If-None-Match / If-Match: deduplication and
    deletion across replicas would silently lose files there (see docs/replicas.md)."""
    key = f"probe/conditional-{uuid.uuid4().hex}"
    try:
        first = obstore.put(store, key, b"1", mode="create")
        honoured = True
        try:
            obstore.put(store, key, b"2", mode="create")
            honoured = False
        except CONFLICTS:
            pass
        try:
            obstore.put(store, key, b"3", mode={"e_tag": '"0000"'})
            honoured = False
        except CONFLICTS:
            pass
        obstore.put(store, key, b"4", mode={"e_tag": first["e_tag"] or ""})
        obstore.delete(store, key)
    except BaseError as error:
        raise ConfigError(
            f"config key files: the object store cannot be used ({type(error).__name__}: "
            f"{str(error).splitlines()[0][:300]})"
        ) from None
    if not honoured:
        raise ConfigError(
            "config key files.endpoint_url: the object store ignores conditional writes "
            "(If-None-Match / If-Match); replicas could lose files on it. Use a store that "
            "supports them (AWS S3, SeaweedFS)"
        )
