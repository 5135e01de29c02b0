"""Which HTTP stack should the emulator use?  The same trivial JSON endpoint on three stacks.

Each server parses a small JSON body with orjson and answers a fixed chat-completion body; the
load comes from separate aiohttp processes (as in ``emulator_capacity.py``).  Reports requests/s
and requests per CPU-second of the server process (robust on a shared machine), best of
``--repeat`` runs.  Prints ONE JSON object.

    python benchmarks/http_stacks.py [--seconds 3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time

from emulator_capacity import _measure
from turbogate.procs import free_port

SERVER = r'''
import sys, orjson
kind, port = sys.argv[1], int(sys.argv[2])
PAYLOAD = orjson.dumps({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message":
    {"role": "assistant", "content": "hello world " * 8}}], "usage": {"prompt_tokens": 10, "completion_tokens": 16}})
if kind == "uvicorn-raw-asgi":
    import uvicorn
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        msg = await receive()
        orjson.loads(msg.get("body") or b"{}")
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(PAYLOAD)).encode())]})
        await send({"type": "http.response.body", "body": PAYLOAD})
    uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", access_log=False,
                log_level="warning", lifespan="off")
elif kind == "uvicorn-starlette":
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route
    async def h(request):
        orjson.loads(await request.body())
        return Response(PAYLOAD, media_type="application/json")
    uvicorn.run(Starlette(routes=[Route("/v1/chat/completions", h, methods=["POST"])]), host="127.0.0.1",
                port=port, loop="uvloop", http="httptools", access_log=False, log_level="warning")
else:
    import uvloop
    from aiohttp import web
    async def h(request):
        orjson.loads(await request.read())
        return web.Response(body=PAYLOAD, content_type="application/json")
    app = web.Application()
    app.router.add_post("/v1/chat/completions", h)
    uvloop.install()
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)
'''

STACKS = ("uvicorn-raw-asgi", "uvicorn-starlette", "aiohttp-web")


def _wait_listening(port: int) -> None:
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"server on port {port} did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    best: dict[str, dict[str, float]] = {k: {"rps": 0.0, "rps_per_server_cpu_s": 0.0} for k in STACKS}
    for _ in range(args.repeat):
        for kind in STACKS:
            port = free_port()
            proc = subprocess.Popen([sys.executable, "-c", SERVER, kind, str(port)])
            try:
                _wait_listening(port)
                url = f"http://127.0.0.1:{port}/v1/chat/completions"
                _measure(url, 1, 8, 0.5, False, 16)
                r = _measure(url, 2, args.concurrency, args.seconds, False, 16, proc.pid)
                for key in ("rps", "rps_per_server_cpu_s"):
                    best[kind][key] = max(best[kind][key], round(r.get(key, 0.0)))
            finally:
                proc.terminate()
                proc.wait()
    print(json.dumps({"best_of": args.repeat, "concurrency": args.concurrency, "stacks": best,
                      "fastest_per_cpu": max(best, key=lambda k: best[k]["rps_per_server_cpu_s"])}))


if __name__ == "__main__":
    main()
