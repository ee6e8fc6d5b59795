"""Two S3 clients against one real S3 server (SeaweedFS on loopback): aioboto3 vs obstore.

Measures what the file store and the shared parse cache do: a 20 MB upload streamed in 1 MiB
pieces (multipart, as the Files API route feeds it), and small objects (a ~300-byte record:
PUT, GET, conditional create) one at a time and 16 at once. Prints numbers; passes no judgement.

    python bench/object_store.py [--endpoint http://127.0.0.1:8333] [--rounds 5] [--small 300]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aioboto3
import obstore
from obstore.store import S3Store

from tests.engines import SeaweedFS

MIB = 1024 * 1024
BUCKET = "bench"
PIECE = MIB
PART = 8 * MIB  # multipart part size for both clients
RECORD = b'{"id": "file-0123456789abcdef01234567", "owner": "team-a", "filename": "r.pdf"}' * 4


def percentiles(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]  # noqa: E731
    return f"p50 {p(0.5):6.2f} ms  p90 {p(0.9):6.2f} ms  p99 {p(0.99):6.2f} ms"


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


class Boto:
    name = "aioboto3 " + aioboto3.__version__ if hasattr(aioboto3, "__version__") else "aioboto3"

    def __init__(self, endpoint: str) -> None:
        self.session = aioboto3.Session(
            aws_access_key_id="bench", aws_secret_access_key="bench", region_name="us-east-1"
        )
        self.endpoint = endpoint
        self.client: Any = None

    async def __aenter__(self) -> Boto:
        self._cm = self.session.client("s3", endpoint_url=self.endpoint)
        self.client = await self._cm.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._cm.__aexit__(None, None, None)

    async def upload(self, key: str, data: bytes) -> None:
        """Multipart by hand, as aioboto3 needs it for a stream of unknown length."""
        c = self.client
        started = await c.create_multipart_upload(Bucket=BUCKET, Key=key)
        upload_id, parts, buffer, number = started["UploadId"], [], bytearray(), 1
        for offset in range(0, len(data), PIECE):
            buffer += data[offset : offset + PIECE]
            if len(buffer) >= PART:
                part = await c.upload_part(
                    Bucket=BUCKET,
                    Key=key,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=bytes(buffer),
                )
                parts.append({"ETag": part["ETag"], "PartNumber": number})
                number, buffer = number + 1, bytearray()
        if buffer:
            part = await c.upload_part(
                Bucket=BUCKET, Key=key, UploadId=upload_id, PartNumber=number, Body=bytes(buffer)
            )
            parts.append({"ETag": part["ETag"], "PartNumber": number})
        await c.complete_multipart_upload(
            Bucket=BUCKET, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
        )

    async def put(self, key: str, data: bytes) -> None:
        await self.client.put_object(Bucket=BUCKET, Key=key, Body=data)

    async def create(self, key: str, data: bytes) -> None:
        await self.client.put_object(Bucket=BUCKET, Key=key, Body=data, IfNoneMatch="*")

    async def get(self, key: str) -> bytes:
        answer = await self.client.get_object(Bucket=BUCKET, Key=key)
        async with answer["Body"] as body:
            data: bytes = await body.read()
            return data


class Obstore:
    name = "obstore " + getattr(obstore, "__version__", "")

    def __init__(self, endpoint: str) -> None:
        self.store = S3Store(
            BUCKET,
            endpoint=endpoint,
            access_key_id="bench",
            secret_access_key="bench",
            region="us-east-1",
            client_options={"allow_http": True},
        )

    async def __aenter__(self) -> Obstore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def upload(self, key: str, data: bytes) -> None:
        writer = obstore.open_writer_async(self.store, key, buffer_size=PART)
        for offset in range(0, len(data), PIECE):
            await writer.write(data[offset : offset + PIECE])
        await writer.close()

    async def put(self, key: str, data: bytes) -> None:
        await obstore.put_async(self.store, key, data)

    async def create(self, key: str, data: bytes) -> None:
        await obstore.put_async(self.store, key, data, mode="create")

    async def get(self, key: str) -> bytes:
        result = await obstore.get_async(self.store, key)
        return bytes(await result.bytes_async())


class ObstoreSync(Obstore):
    """The same client through its blocking calls, each in a worker thread (as the file store
    protocol is called from the event loop)."""

    name = "obstore sync-in-thread"

    async def upload(self, key: str, data: bytes) -> None:
        writer = await asyncio.to_thread(obstore.open_writer, self.store, key, buffer_size=PART)
        for offset in range(0, len(data), PIECE):
            await asyncio.to_thread(writer.write, data[offset : offset + PIECE])
        await asyncio.to_thread(writer.close)

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(obstore.put, self.store, key, data)

    async def create(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(obstore.put, self.store, key, data, mode="create")

    async def get(self, key: str) -> bytes:
        result = await asyncio.to_thread(obstore.get, self.store, key)
        return bytes(await asyncio.to_thread(result.bytes))


async def measure(client: Any, rounds: int, small: int, data: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    async with client:
        uploads = []
        for _ in range(rounds):
            uploads.append(await timed(lambda: client.upload(f"big/{uuid.uuid4().hex}", data)))
        mb = len(data) / MIB
        best, median = min(uploads), statistics.median(uploads)
        out["20 MB upload"] = (
            f"{mb / median:6.1f} MB/s median ({median * 1000:.0f} ms), {mb / best:.1f} MB/s best"
        )
        keys = [f"small/{uuid.uuid4().hex}" for _ in range(small)]
        puts = [await timed(lambda k=k: client.put(k, RECORD)) for k in keys]  # type: ignore[misc]
        gets = [await timed(lambda k=k: client.get(k)) for k in keys]  # type: ignore[misc]
        creates = [
            await timed(lambda: client.create(f"c/{uuid.uuid4().hex}", RECORD))
            for _ in range(small)
        ]
        out["small PUT"] = percentiles(puts)
        out["small GET"] = percentiles(gets)
        out["conditional create"] = percentiles(creates)
        started = time.perf_counter()
        for start in range(0, small, 16):
            await asyncio.gather(*(client.get(k) for k in keys[start : start + 16]))
        elapsed = time.perf_counter() - started
        out["small GET, 16 at once"] = f"{small / elapsed:7.0f} objects/s"
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="an S3 server to use instead of starting SeaweedFS")
    parser.add_argument("--rounds", type=int, default=5, help="20 MB uploads per client")
    parser.add_argument("--small", type=int, default=300, help="small objects per client")
    args = parser.parse_args()
    server = None
    endpoint = args.endpoint
    if endpoint is None:
        server = SeaweedFS.start(Path(tempfile.mkdtemp(prefix="bench-s3-")))
        endpoint = server.endpoint
    try:
        async with Boto(endpoint) as boto:
            with contextlib.suppress(boto.client.exceptions.ClientError):  # exists already
                await boto.client.create_bucket(Bucket=BUCKET)
        data = os.urandom(20 * MIB)
        print(f"S3 server: {endpoint} (SeaweedFS)" if server else f"S3 server: {endpoint}")
        print(f"python {platform.python_version()}, {os.cpu_count()} cores, load {os.getloadavg()}")
        clients = [Boto(endpoint), Obstore(endpoint), ObstoreSync(endpoint)]
        results: dict[str, dict[str, str]] = {}
        # Two passes: the first warms up connections and the server; the second is printed.
        for _ in range(2):
            for client in clients:
                results.setdefault(client.name, {}).update(
                    await measure(client, args.rounds, args.small, data)
                )
        for name, rows in results.items():
            print(f"\n{name}")
            for metric, value in rows.items():
                print(f"  {metric:24} {value}")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())
