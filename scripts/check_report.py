#!/usr/bin/env python3
"""Load a report.html in headless Chromium and fail on any console error or uncaught exception.

Usage: python scripts/check_report.py RUN_DIR/report.html [--chromium PATH] [--timeout S] [--screenshot PNG]

Talks to Chromium over the DevTools protocol (``websockets``): enables Runtime, Log, Page and
Network (any request beyond file:/data: counts as an error: the report must work offline),
reloads the page so nothing is missed, waits for the load event and for plotly to draw, checks that
the page reads well (no number in exponent form such as ``1e+03``, no ``-0.0 %``, no two annotations
of one figure overlapping, e.g. knee labels), optionally saves a full-page screenshot, then prints
one JSON line and exits 0 (clean), 1 (errors found) or 2 (could not run Chromium).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websockets

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _devtools_port(user_dir: Path, proc: subprocess.Popen[bytes], timeout: float) -> int:
    marker = user_dir / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with code {proc.returncode}")
        if marker.is_file():
            first = marker.read_text().splitlines()[:1]
            if first and first[0].isdigit():
                return int(first[0])
        time.sleep(0.05)
    raise RuntimeError("chromium did not open its DevTools port")


def _page_ws(port: int, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:
                targets = json.loads(resp.read())
        except OSError:  # the port file can appear a moment before the endpoint answers
            time.sleep(0.1)
            continue
        pages = [t for t in targets if t.get("type") == "page" and t.get("webSocketDebuggerUrl")]
        if pages:
            return str(pages[0]["webSocketDebuggerUrl"])
        time.sleep(0.1)
    raise RuntimeError("no page target in chromium")


# Run in the page: text that reads badly, and annotations of one figure whose boxes intersect.
READABILITY_JS = r"""
(() => {
  const bad = [];
  const texts = [document.body.innerText];
  document.querySelectorAll('.plotly-graph-div svg text').forEach(t => texts.push(t.textContent));
  for (const t of texts) {
    const m = t.match(/\b\d+(\.\d+)?e[+-]?\d+\b/gi); if (m) bad.push('exponent: ' + m.slice(0, 3).join(' '));
    if (/-0\.0+\s?%/.test(t)) bad.push('negative zero percent');
  }
  document.querySelectorAll('.plotly-graph-div').forEach(div => {
    const boxes = [...div.querySelectorAll('g.annotation')].map(a => [a.textContent, a.getBoundingClientRect()])
      .filter(([_, r]) => r.width > 0);
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const [ta, a] = boxes[i], [tb, b] = boxes[j];
      if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1)
        bad.push('overlapping labels in ' + div.id + ': "' + ta + '" / "' + tb + '"');
    }
  });
  return [...new Set(bad)];
})()
"""


async def _inspect(ws_url: str, timeout: float, screenshot: Path | None = None,
                   probe: str | None = None) -> dict[str, Any]:
    errors: list[str] = []
    msg_id = 0
    async with websockets.connect(ws_url, max_size=None) as ws:
        pending: dict[int, asyncio.Future[Any]] = {}
        loaded = asyncio.Event()

        async def reader() -> None:
            async for raw in ws:
                msg = json.loads(raw)
                if "id" in msg and msg["id"] in pending:
                    pending.pop(msg["id"]).set_result(msg)
                    continue
                method, params = msg.get("method"), msg.get("params", {})
                if method == "Runtime.exceptionThrown":
                    d = params.get("exceptionDetails", {})
                    errors.append("exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
                elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                    args = [a.get("value") or a.get("description") for a in params.get("args", [])]
                    errors.append("console.error: " + " ".join(str(a) for a in args))
                elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                    e = params["entry"]
                    errors.append(f"log ({e.get('source')}): {e.get('text')} {e.get('url', '')}".strip())
                elif method == "Network.requestWillBeSent":
                    url = str(params.get("request", {}).get("url", ""))
                    if not url.startswith(("file:", "data:", "blob:", "about:")):
                        errors.append(f"network request (report must be offline): {url}")
                elif method == "Page.loadEventFired":
                    loaded.set()

        async def call(method: str, **params: Any) -> Any:
            nonlocal msg_id
            msg_id += 1
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            pending[msg_id] = fut
            await ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
            return await asyncio.wait_for(fut, timeout)

        task = asyncio.create_task(reader())
        for domain in ("Runtime", "Log", "Page", "Network"):
            await call(f"{domain}.enable")
        await call("Page.reload", ignoreCache=True)
        await asyncio.wait_for(loaded.wait(), timeout)
        plots = 0
        deadline = time.monotonic() + timeout
        expected = 0
        while time.monotonic() < deadline:
            res = await call("Runtime.evaluate", returnByValue=True, expression=(
                "[document.querySelectorAll('.plotly-graph-div').length,"
                " document.querySelectorAll('.plotly-graph-div .main-svg').length > 0 ?"
                " document.querySelectorAll('.plotly-graph-div.js-plotly-plot').length : 0]"))
            expected, plots = res["result"]["result"]["value"]
            if expected and plots >= expected:
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(0.5)  # let late errors arrive
        res = await call("Runtime.evaluate", returnByValue=True, expression=READABILITY_JS)
        errors.extend("readability: " + str(x) for x in res["result"]["result"].get("value") or [])
        probed = None
        if probe is not None:  # a test's own question about the drawn page (e.g. a figure's axis range)
            res = await call("Runtime.evaluate", returnByValue=True, expression=probe)
            probed = res["result"]["result"].get("value")
        if screenshot is not None:
            await call("Emulation.setDeviceMetricsOverride", width=1400, height=900, deviceScaleFactor=1,
                       mobile=False)
            await asyncio.sleep(0.5)  # plotly redraws at the new width
            shot = await call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
            screenshot.write_bytes(base64.b64decode(shot["result"]["data"]))
            # Also in slices of 1,400 px (PATH-1.png, …), legible where a viewer scales the whole page down.
            metrics = await call("Page.getLayoutMetrics")
            height = int(metrics["result"]["cssContentSize"]["height"])
            for n, top in enumerate(range(0, height, 1400), start=1):
                clip = {"x": 0, "y": top, "width": 1400, "height": min(1400, height - top), "scale": 1}
                part = await call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)
                screenshot.with_name(f"{screenshot.stem}-{n}{screenshot.suffix}").write_bytes(
                    base64.b64decode(part["result"]["data"]))
        task.cancel()
    return {"errors": errors, "figures": expected, "rendered": plots, **({"probe": probed} if probe else {})}


def check(report: Path, chromium: str, timeout: float = 30.0, screenshot: Path | None = None,
          probe: str | None = None) -> dict[str, Any]:
    # Chromium's helper processes may still be writing the profile as it is removed: a leftover
    # temp folder must not turn a clean page into a failed check.
    with tempfile.TemporaryDirectory(prefix="tg-chromium-", ignore_cleanup_errors=True) as tmp:
        user_dir = Path(tmp)
        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run", "--disable-default-apps", "--disable-extensions",
               "--disable-dev-shm-usage", f"--user-data-dir={user_dir}", "--remote-debugging-port=0",
               report.resolve().as_uri()]
        # Its own process group, so stopping it also stops the renderer and zygote children.
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            port = _devtools_port(user_dir, proc, timeout)
            ws_url = _page_ws(port, timeout)
            return asyncio.run(_inspect(ws_url, timeout, screenshot, probe))
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path)
    ap.add_argument("--chromium", default=None)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--screenshot", type=Path, default=None, help="Also save a full-page PNG here.")
    args = ap.parse_args()
    chromium = args.chromium or find_chromium()
    if chromium is None:
        print(json.dumps({"ok": False, "reason": "chromium not found"}))
        return 2
    if not args.report.is_file():
        print(json.dumps({"ok": False, "reason": f"{args.report} does not exist"}))
        return 2
    try:
        result = check(args.report, chromium, args.timeout, args.screenshot)
    except (RuntimeError, OSError, TimeoutError) as exc:
        print(json.dumps({"ok": False, "reason": f"{type(exc).__name__}: {exc}"}))
        return 2
    ok = not result["errors"] and result["figures"] > 0 and result["rendered"] >= result["figures"]
    print(json.dumps({"ok": ok, **result}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
