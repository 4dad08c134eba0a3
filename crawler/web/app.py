"""The Starlette app of quants serve: routes, read-only catalog access, errors as 4xx.

Every route is GET, the catalog opened read-only; a bad parameter is a 400, never a traceback.
Details: docs/internals/web.md#app
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from crawler.base.budget import DEFAULT_HEADROOM_GIB
from crawler.base.errors import CatalogError, InvalidConfig, NothingFits, QuantsError, UsageError
from crawler.catalog.reader import Reader
from crawler.web.params import BadParam, integer, parse_search, pick, search_values, text
from crawler.web.params import ctx as ctx_param
from crawler.web.params import gib as gib_param
from crawler.web.views import model_view, quant_view, scans_view, search_view

if TYPE_CHECKING:
    from crawler.catalog import Catalog

logger = logging.getLogger(__name__)

__all__ = ["create_app"]

HERE = Path(__file__).resolve().parent
MAX_QUERY_STRING = 4096
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
# Same characters the CLI escapes (crawler.cli._output): controls, bidi overrides, surrogates.
_CONTROL = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_HEADERS = {
    # Only our own files: no inline script, no third-party origin (charts are inline SVG).
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self';"
    " img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self';"
    " frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def shown(value: object) -> str:
    """Text from the Hub or a GGUF header with controls made visible (``\\x1b``, ``\\u202e``):
    a right-to-left override must not reorder a file name on screen. Autoescape does the rest."""
    if value is None:
        return "-"
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(value))


def gib(n: object) -> str:
    """Bytes as GiB with two decimals (``-`` for none)."""
    return "-" if not isinstance(n, int | float) else f"{n / 1024**3:.2f} GiB"


def bits(v: object) -> str:
    """A bits value without trailing zeros (``-`` for none)."""
    return "-" if not isinstance(v, int | float) else f"{v:g}"


class Site:
    """The catalog URL and how to read it; the templates."""

    def __init__(self, db_url: str, headroom_gib: float = DEFAULT_HEADROOM_GIB) -> None:
        self.db_url = db_url
        #: The headroom when a request gives none (crawler.base.budget; QUANTS_HEADROOM).
        self.headroom_gib = headroom_gib
        self._catalog: Catalog | None = None
        self._lock = threading.Lock()
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            # The templates ship in the package: compiled once per process, never re-checked
            # (auto_reload stats every template of a page on every request).
            auto_reload=False,
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.env.filters.update(shown=shown, gib=gib, bits=bits)

    @contextmanager
    def reader(self) -> Iterator[Reader]:
        """A read-only reader for one request (one snapshot)."""
        with Reader.open(self.db_url) as reader:
            yield reader

    def catalog(self) -> Catalog:
        """The catalog on read-only connections (opened on first use)."""
        with self._lock:
            if self._catalog is None:
                from crawler.catalog import Catalog

                self._catalog = Catalog.open_readonly(self.db_url)
            return self._catalog

    def close(self) -> None:
        """Release the read-only engine."""
        if self._catalog is not None:
            self._catalog.close()

    def page(self, name: str, code: int = 200, **context: Any) -> HTMLResponse:
        """Render template ``name`` (HTTP status ``code``)."""
        html = self.env.get_template(name).render(**context)
        return HTMLResponse(html, status_code=code, headers=_HEADERS)


def _json(data: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=status, headers=_HEADERS)


def _query(request: Request) -> dict[str, str]:
    if len(request.url.query) > MAX_QUERY_STRING:
        raise BadParam(f"query string longer than {MAX_QUERY_STRING} characters")
    return dict(request.query_params)


Handler = Callable[[Site, Request], Response]


def create_app(
    db_url: str,
    *,
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS,
    headroom_gib: float = DEFAULT_HEADROOM_GIB,
) -> Starlette:
    """The app over the catalog at ``db_url``; CatalogError / SchemaOutOfDate now if it cannot
    be read (checked once here, so a bad ``--db`` fails at start, not on the first request)."""
    Reader.open(db_url).close()
    site = Site(db_url, headroom_gib)

    def route(path: str, handler: Handler, *, api: bool) -> Route:
        def endpoint(request: Request) -> Response:
            started = time.perf_counter()
            response = answer(request)
            # Server time of this request (bench/bench_serve.py reads it; browsers show it).
            ms = (time.perf_counter() - started) * 1000
            response.headers["Server-Timing"] = f"app;dur={ms:.1f}"
            return response

        def answer(request: Request) -> Response:
            try:
                return handler(site, request)
            except (BadParam, UsageError) as exc:
                return _error(site, api, 400, str(exc))
            except NothingFits as exc:
                return _error(site, api, 404, str(exc), code="nothing_fits")
            except CatalogError as exc:
                return _error(site, api, 503, str(exc))
            except QuantsError as exc:
                return _error(site, api, 400, str(exc))
            except Exception:
                logger.exception("error answering %s", request.url.path)
                return _error(site, api, 500, "internal error (see the server's log)")

        return Route(path, endpoint, methods=["GET"])

    routes = [
        route("/", _search_page, api=False),
        route("/model", _model_page, api=False),
        route("/quant", _quant_page, api=False),
        route("/scans", _scans_page, api=False),
        route("/api/search", _search_api, api=True),
        route("/api/compare", _compare_api, api=True),
        route("/api/quant", _quant_api, api=True),
        route("/api/scans", _scans_api, api=True),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        api = request.url.path.startswith("/api/")
        status = getattr(exc, "status_code", 404)
        message = "method not allowed (read-only)" if status == 405 else "not found"
        return _error(site, api, status, message)

    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        404: not_found,
        405: not_found,
    }
    app = Starlette(
        routes=routes,
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))],
        exception_handlers=handlers,
        lifespan=_lifespan(site),
    )
    return app


def _lifespan(site: Site) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            site.close()

    return lifespan


def _error(site: Site, api: bool, status: int, message: str, *, code: str = "") -> Response:
    if api:
        body: dict[str, Any] = {"error": message}
        if code:
            body["code"] = code
        return _json(body, status)
    return site.page("error.html", status, status=status, message=message, nav="")


# --- handlers ----------------------------------------------------------------------------------


def _search_api(site: Site, request: Request) -> Response:
    req = parse_search(_query(request), headroom_gib=site.headroom_gib)
    with site.reader() as reader:
        return _json(search_view(reader, req))


def _search_page(site: Site, request: Request) -> Response:
    query = _query(request)
    form = search_values(query)
    doc = error = None
    if "vram" in form or "gpu" in form:
        try:
            req = parse_search(query, headroom_gib=site.headroom_gib)
            with site.reader() as reader:
                doc = search_view(reader, req)
        except (NothingFits, UsageError, InvalidConfig) as exc:
            error = str(exc)
    return site.page("search.html", form=form, doc=doc, error=error, nav="search")


def _compare_api(site: Site, request: Request) -> Response:
    query = _query(request)
    pick(query, ("q",))
    q = text("q", query.get("q", ""), required=True)
    assert q is not None
    with site.reader() as reader:
        return _json(model_view(reader, q, chart=False))


def _model_page(site: Site, request: Request) -> Response:
    query = _query(request)
    pick(query, ("q",))
    q = text("q", query.get("q", ""))
    doc = error = None
    if q is not None:
        try:
            with site.reader() as reader:
                doc = model_view(reader, q, chart=True)
        except UsageError as exc:
            error = str(exc)
    return site.page("model.html", q=q or "", doc=doc, error=error, nav="model")


def _quant_args(site: Site, request: Request) -> tuple[str, str, float | None, float, int | None]:
    query = _query(request)
    pick(query, ("repo", "path", "vram", "headroom", "ctx"))
    repo = text("repo", query.get("repo", ""), required=True)
    path = text("path", query.get("path", ""), required=True)
    vram = gib_param("vram", query.get("vram", ""))
    headroom = gib_param("headroom", query.get("headroom", ""), 0, 1024)
    ctx = ctx_param("ctx", query.get("ctx", ""))
    assert repo is not None and path is not None
    return repo, path, vram, site.headroom_gib if headroom is None else headroom, ctx


def _quant_doc(site: Site, request: Request, *, chart: bool) -> dict[str, Any]:
    repo, path, vram, headroom, ctx = _quant_args(site, request)
    with site.reader() as reader:
        doc = quant_view(
            reader, repo, path, vram_gib=vram, headroom_gib=headroom, ctx=ctx, chart=chart
        )
    if doc is None:
        raise _NotInCatalog(f"no live quant {repo}/{path} in the catalog")
    return doc


class _NotInCatalog(LookupError):
    pass


def _quant_api(site: Site, request: Request) -> Response:
    try:
        return _json(_quant_doc(site, request, chart=False))
    except _NotInCatalog as exc:
        return _error(site, True, 404, str(exc))


def _quant_page(site: Site, request: Request) -> Response:
    try:
        doc = _quant_doc(site, request, chart=True)
    except _NotInCatalog as exc:
        return _error(site, False, 404, str(exc))
    return site.page("quant.html", doc=doc, nav="quant")


def _scans_doc(site: Site, request: Request) -> dict[str, Any]:
    query = _query(request)
    pick(query, ("limit",))
    limit = integer("limit", query.get("limit", ""), 1, 500) or 20
    with site.reader() as reader:
        return scans_view(site.catalog(), reader, limit=limit)


def _scans_api(site: Site, request: Request) -> Response:
    return _json(_scans_doc(site, request))


def _scans_page(site: Site, request: Request) -> Response:
    return site.page("scans.html", doc=_scans_doc(site, request), nav="scans")
