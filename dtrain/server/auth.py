"""Who may talk to the server: the bearer token, the loopback rule, read-only mode.

- Bound to a loopback address (the default, 127.0.0.1), the server trusts the local user and
  needs no token, but it refuses a `Host` header that is not a loopback name: a web page on
  another site could otherwise reach it through DNS rebinding.
- Bound to any other address, every request (API, log streams, dashboard pages, /metrics)
  must carry the token: `Authorization: Bearer TOKEN`, or the `dtrain_token` cookie that the
  server sets when a page is opened once with `?token=TOKEN` (a browser's EventSource cannot
  send headers, a cookie it can). The cookie is HttpOnly and SameSite=Strict, and the server
  sends no CORS headers, so other sites can neither read answers nor send the cookie.
- A change (any method but GET and HEAD) that a page of another site sent is refused (403): on
  loopback no token stands in the way, and a form or a `fetch(..., {mode: "no-cors"})` on any page
  the user opens may POST to 127.0.0.1 without a CORS preflight (suspend, resume, verify). Browsers
  name the sender's site in `Sec-Fetch-Site`; scripts (curl, httpx) send none and pass. A browser
  without it (Safari before 16.4, older Firefox) still sends `Origin` on a cross-site POST: where
  Sec-Fetch-Site is absent, an Origin other than the server's own (its scheme, as uvicorn read it with
  X-Forwarded-Proto from a trusted proxy, and its Host; behind --root-path also X-Forwarded-Host) is
  refused, as Django's and Jupyter's Origin checks do. No Origin (curl, the SDK) passes.
- `--read-only` refuses every method but GET and HEAD.

The token is made on first start, kept in `$DTRAIN_HOME/server-token` (mode 0600, never
written through a symlink) and printed once.
"""

from __future__ import annotations

import hmac
import html
import ipaddress
import json
import os
import secrets
import stat
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode

from dtrain.errors import ConflictError

TOKEN_FILE = "server-token"
COOKIE = "dtrain_token"
LOOPBACK_NAMES = ("localhost",)
READS = ("GET", "HEAD")
# Sec-Fetch-Site values of a request the server's own pages (same-origin) or the user (none: typed, a
# bookmark) began; cross-site and same-site (another port of localhost) are other pages'
OWN_SITE = ("same-origin", "none")
CHANGE_FROM = "change jobs from this server's own dashboard, the CLI or a script (curl, the SDK)"
DEFAULT_PORTS = {"http": "80", "https": "443"}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost': the addresses that need no token."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def load_or_create_token(home: Path) -> tuple[str, bool]:
    """The server token and whether it was just made. A file readable by others is refused."""
    path = home / TOKEN_FILE
    if os.path.lexists(path):
        return _read_token(path), False
    # Written whole under a new name, then linked in (a link never replaces a file): a server
    # started at the same moment reads the whole token or makes none. A file created at its
    # name and written next was read empty in between ("too short; remove it").
    token = secrets.token_urlsafe(32)
    tmp = home / f".{TOKEN_FILE}.{secrets.token_hex(6)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.link(tmp, path)
    except FileExistsError:
        return _read_token(path), False
    finally:
        os.unlink(tmp)
    return token, True


def _read_token(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as err:
        raise ConflictError(f"cannot read the server token {path} ({err.strerror}); remove it and start "
                            f"'dtrain server' again to make a new one") from None
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077 or st.st_uid != os.getuid():
            raise ConflictError(f"the server token {path} is not a private file (mode "
                                f"{stat.S_IMODE(st.st_mode):o}); run 'chmod 600 {path}' or remove it")
        token = f.read().strip()
    if len(token) < 32:
        raise ConflictError(f"the server token {path} is too short; remove it to make a new one")
    return token


class Guard:
    """ASGI middleware: the token (when one is set), the Host check on loopback, read-only."""

    def __init__(self, app, *, token: str | None, read_only: bool):
        self.app = app
        self.token = token
        self.read_only = read_only

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if self.token is None:
            host = headers.get("host", "")
            if not is_loopback(_host_name(host)):
                return await _refuse(send, 421, f"unexpected Host header {host!r}: this server is bound "
                                                f"to loopback; open it as http://127.0.0.1:PORT/")
        elif "token" in query and scope["method"] in ("GET", "HEAD"):
            return await self._exchange(scope, send, query, cross_site=headers.get("sec-fetch-site") == "cross-site")
        elif not self._authorised(headers):
            return await _refuse(send, 401, "missing or wrong token: send 'Authorization: Bearer TOKEN' "
                                            "(the token is in $DTRAIN_HOME/server-token), or open the URL "
                                            "that 'dtrain server' printed once")
        site = headers.get("sec-fetch-site", "none")
        if scope["method"] not in READS and site not in OWN_SITE:
            return await _refuse(send, 403, f"a {scope['method']} sent by a page of another site (Sec-Fetch-Site: "
                                            f"{site}) is refused: {CHANGE_FROM}")
        origin = headers.get("origin")
        if scope["method"] not in READS and "sec-fetch-site" not in headers and origin is not None \
                and not _own_origin(origin, scope, headers):
            return await _refuse(send, 403, f"a {scope['method']} sent by a page of another site (Origin: "
                                            f"{origin[:200]}) is refused: {CHANGE_FROM}")
        if self.read_only and scope["method"] not in READS:
            return await _refuse(send, 403, f"this server is read-only ({scope['method']} refused); "
                                            f"restart 'dtrain server' without --read-only to change things")
        return await self.app(scope, receive, send)

    def _authorised(self, headers: dict[str, str]) -> bool:
        given = ""
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        else:
            for part in headers.get("cookie", "").split(";"):
                key, _, value = part.strip().partition("=")
                if key == COOKIE:
                    given = value
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())

    async def _exchange(self, scope, send, query: dict[str, str], *, cross_site: bool):
        """`?token=` once: check it, set the cookie, and send the browser on without it in the URL.

        A link on another site (a chat, a wiki) begins a cross-site navigation, and a browser sends no
        SameSite=Strict cookie anywhere along it, redirects included: a 303 to the page came back 401,
        reload or not. So that link gets a page of ours that moves on by itself, a navigation this
        site begins, which carries the cookie."""
        if not hmac.compare_digest(query.pop("token").encode(), self.token.encode()):
            return await _refuse(send, 401, "wrong token in the URL: use the URL that 'dtrain server' printed")
        # Relative to the address the browser asked for ('./' and the path's last part): behind a path prefix
        # (kubectl proxy, an ingress at /dtrain/) an absolute '/...' left it. './' keeps '//host/...' and
        # 'javascript:...' from naming another site; the part escaped again, as it came: a decoded %0d%0a is no
        # header text (h11 refused it, and the answer was a dropped connection)
        location = "./" + quote(scope["path"].rsplit("/", 1)[-1]) + (("?" + urlencode(query)) if query else "")
        cookie = (b"set-cookie", f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode())
        if not cross_site:
            await send({"type": "http.response.start", "status": 303,
                        "headers": [(b"location", location.encode()), cookie, (b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        url = html.escape(location)  # quoted above: no quote, '<' or '>' is left in it to end the script
        body = (f'<!doctype html><script>location.replace("{location}" + location.hash)</script>'
                f'<noscript><meta http-equiv="refresh" content="0; url={url}"></noscript>'
                f'<p>Signed in: <a href="{url}">continue</a></p>\n').encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [cookie, (b"content-type", b"text/html; charset=utf-8"),
                                (b"cache-control", b"no-store"), (b"referrer-policy", b"no-referrer"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def _own_origin(origin: str, scope, headers: dict[str, str]) -> bool:
    """Whether an Origin header names this server as the browser reached it: scheme://host[:port] of the
    request (uvicorn set the scheme from X-Forwarded-Proto where the peer is in FORWARDED_ALLOW_IPS), or,
    behind a proxy given as --root-path, of the X-Forwarded-Host/Proto it added. 'null' is never ours."""
    ours = [_origin_of(scope.get("scheme", "http"), headers.get("host", ""))]
    forwarded = headers.get("x-forwarded-host", "").split(",")[0].strip()
    if scope.get("root_path") and forwarded:  # a browser cannot add X-Forwarded-Host without a CORS preflight
        proto = headers.get("x-forwarded-proto", "").split(",")[0].strip().lower() or scope.get("scheme", "http")
        ours.append(_origin_of(proto, forwarded))
    return _origin_of(*origin.strip().split("://", 1)) in ours if "://" in origin else False


def _origin_of(scheme: str, host: str) -> str:
    """'HTTP', 'Example.org:80' -> 'http://example.org:80' (the default port written out, for comparing)."""
    scheme, host = scheme.lower(), host.lower().rstrip("/")
    if host.startswith("[") and not host.endswith("]") or not host.startswith("[") and ":" in host:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{DEFAULT_PORTS.get(scheme, '')}"


def _host_name(host: str) -> str:
    """'127.0.0.1:8080' -> '127.0.0.1'; '[::1]:80' -> '::1'."""
    if host.startswith("["):
        return host[1:host.find("]")]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


async def _refuse(send, status: int, message: str) -> None:
    body = json.dumps({"error": message, "kind": "Unauthorized" if status == 401 else "Refused"}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="dtrain"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
