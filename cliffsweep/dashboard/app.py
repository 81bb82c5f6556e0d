"""`cliffsweep dashboard STORE [STORE...]`: a live page of a sweep, served from its store alone.

A small Starlette app (installed with Ray's dashboard) served by uvicorn, with Plotly's JavaScript
bundle from the `plotly` package's own copy: no CDN, no external font, so the page works on an
air-gapped cluster (docs/design.md says why these). It reads the store, never the driver, so it
works while a sweep runs, after it, and from a laptop against a cluster's bucket.

Loopback (127.0.0.1) unless --host says otherwise; then every request must carry a token (printed
once in the address; a cookie keeps it), since the page shows the sweep's data and errors.
"""

from __future__ import annotations

import hmac
import secrets
from importlib import resources
from pathlib import Path

from cliffsweep.dashboard.refresh import Refresher

STATIC = Path(__file__).with_name("static")
TOKEN_COOKIE = "cliffsweep_token"


def plotly_js() -> Path:
    """Plotly's bundled JavaScript, as the plotly package ships it (no network)."""
    return Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))


def build_app(board: Refresher, token: str | None = None):
    from starlette.applications import Starlette
    from starlette.background import BackgroundTask
    from starlette.middleware import Middleware
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    async def page(request):
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def script(request):
        name = request.path_params["name"]
        path = plotly_js() if name == "plotly.min.js" else STATIC / name
        if path.parent not in (STATIC, plotly_js().parent) or not path.is_file():
            return PlainTextResponse("not found", status_code=404)
        return FileResponse(path)

    async def snapshot(request):
        version, data = board.current()
        etag = f'"{version}"'
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers={"ETag": etag})
        return Response(data, media_type="application/json", headers={"ETag": etag, "Cache-Control": "no-cache"},
                        background=BackgroundTask(board.delivered, version))

    async def trial(request):
        from starlette.concurrency import run_in_threadpool

        from cliffsweep.dashboard.views import clean

        view = await run_in_threadpool(board.trial, request.path_params["tid"])
        if view is None:
            return JSONResponse({"error": f"no trial {request.path_params['tid']!r} in these stores"}, status_code=404)
        return JSONResponse(clean(view))

    class TokenCheck(BaseHTTPMiddleware):
        async def dispatch(self, request, call_next):
            given = request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE) or ""
            if not hmac.compare_digest(given, token):
                return PlainTextResponse("this dashboard needs its token: open the address it printed", status_code=401)
            response = await call_next(request)
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
            return response

    routes = [Route("/", page), Route("/static/{name}", script), Route("/api/snapshot", snapshot),
              Route("/api/trial/{tid:path}", trial)]
    return Starlette(routes=routes, middleware=[Middleware(TokenCheck)] if token else [])


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1")


def serve(uris: list[str], host: str, port: int, token: str | None, board: Refresher) -> None:
    """Serve until interrupted; the address (with its token, off loopback) is printed once the
    port is ours (a port in use raises OSError here, said in one sentence by the CLI)."""
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    # as uvicorn's own sockets: a dashboard started again at once is not refused for the minute
    # its last run's closed connections wait out (TIME_WAIT); a port another server listens on still is
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    if not is_loopback(host) and not token:
        token = secrets.token_urlsafe(18)
    app = build_app(board, token)
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    address = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    print(f"cliffsweep dashboard of {', '.join(uris)}: {address}", flush=True)
    if not is_loopback(host):
        print(f"warning: listening on {host}, reachable from other hosts; every request needs the token above",
              flush=True)
    board.start()
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])
