"""A real headless Chromium driven over the DevTools protocol with aiohttp's websocket client."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

# Debian's package installs `chromium`; other systems name it differently.
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
]


def find_chromium() -> str | None:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(AssertionError):
    """The page threw, or a DevTools command failed."""


class Browser:
    """One Chromium with one tab; `problems` collects the page's exceptions and console errors
    (a script blocked by the Content-Security-Policy shows up there too)."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.profile = Path(tempfile.mkdtemp(prefix="chromium-"))
        self.problems: list[str] = []
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._loaded = asyncio.Event()
        self._process: asyncio.subprocess.Process | None = None
        self._session: aiohttp.ClientSession | None = None
        self._socket: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self, width: int = 1280, height: int = 900) -> Browser:
        self._process = await asyncio.create_subprocess_exec(
            self.binary,
            *FLAGS,
            f"--user-data-dir={self.profile}",
            f"--window-size={width},{height}",
            "about:blank",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        # Chromium writes the port it chose into the profile once it listens.
        port_file = self.profile / "DevToolsActivePort"
        for _ in range(600):
            if port_file.exists() and port_file.read_text().strip():
                break
            if self._process.returncode is not None:
                raise BrowserError(f"chromium exited with {self._process.returncode}")
            await asyncio.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        self._session = aiohttp.ClientSession()
        async with self._session.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json()
        page = next(t for t in targets if t.get("type") == "page")
        self._socket = await self._session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        self._reader = asyncio.create_task(self._read())
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        await self.send("Log.enable")
        await self.viewport(width, height)
        return self

    async def _read(self) -> None:
        assert self._socket is not None
        async for message in self._socket:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(message.data)
            if "id" in data:
                future = self._pending.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
                continue
            self._event(data.get("method", ""), data.get("params", {}))

    def _event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Page.loadEventFired":
            self._loaded.set()
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            exception = details.get("exception", {})
            self.problems.append(exception.get("description") or details.get("text", "exception"))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.problems.append(" ".join(str(a.get("value", "")) for a in params.get("args", [])))
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            # 401s the page expects (asking for a key) are network errors in the log: not ours.
            if entry.get("level") == "error" and entry.get("source") != "network":
                self.problems.append(entry.get("text", ""))

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        assert self._socket is not None
        ident = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        await self._socket.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        reply = await asyncio.wait_for(future, 60)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    async def viewport(self, width: int, height: int, mobile: bool = False) -> None:
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=mobile,
        )

    async def color_scheme(self, scheme: str) -> None:
        await self.send(
            "Emulation.setEmulatedMedia",
            features=[{"name": "prefers-color-scheme", "value": scheme}],
        )

    async def goto(self, url: str) -> None:
        self._loaded.clear()
        await self.send("Page.navigate", url=url)
        await asyncio.wait_for(self._loaded.wait(), 60)

    async def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, what: str, timeout: float = 30) -> Any:
        """Poll until the expression is truthy; a failure names `what` was awaited."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            value = await self.eval(expression)
            if value:
                return value
            if loop.time() > deadline:
                raise BrowserError(f"the page never showed {what}; problems: {self.problems}")
            await asyncio.sleep(0.1)

    async def set_files(self, selector: str, paths: list[Path]) -> None:
        """Choose files in an <input type=file>, as a person would with the file dialog."""
        document = await self.send("DOM.getDocument")
        found = await self.send(
            "DOM.querySelector", nodeId=document["root"]["nodeId"], selector=selector
        )
        await self.send(
            "DOM.setFileInputFiles", nodeId=found["nodeId"], files=[str(p) for p in paths]
        )

    async def screenshot(self, path: Path, full_page: bool = True) -> Path:
        """A PNG of the page (the whole scrollable height with `full_page`)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = await self.eval(
                "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
            )
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
            params["captureBeyondViewport"] = True
        shot = await self.send("Page.captureScreenshot", **params)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        if self._socket is not None:
            await self._socket.close()
        if self._session is not None:
            await self._session.close()
        if self._process is not None and self._process.returncode is None:
            self._process.terminate()
            try:
                await asyncio.wait_for(self._process.wait(), 10)
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)
