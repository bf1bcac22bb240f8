"""`dtrain server`: the HTTP API, the dashboard and Prometheus /metrics (optional extra 'server')."""

from __future__ import annotations

import re

from dtrain.cli.format import warn
from dtrain.cli.jobs import whole_number
from dtrain.client import Client
from dtrain.errors import SetupError, SpecError
from dtrain.names import check_port, shown

MAX_ROOT_PATH = 200
# a proxy's path prefix: /SEGMENT[/SEGMENT...] of URL-safe letters (uvicorn puts it in front of each path as ASCII)
_ROOT_PATH = re.compile(r"(/[A-Za-z0-9._~-]+)+")


def check_root_path(value: str) -> None:
    """--root-path: the prefix a proxy strips before the request reaches us (/dtrain), or empty."""
    if value and (len(value) > MAX_ROOT_PATH or not _ROOT_PATH.fullmatch(value)):
        raise SpecError(f"invalid --root-path {shown(value)}: use the proxy's path prefix, starting with '/' and "
                        f"without a trailing one, at most {MAX_ROOT_PATH} letters, digits, '.', '_', '~', '-' and "
                        f"'/', e.g. --root-path /dtrain")


def cmd_server(args, client: Client) -> int:
    check_port(args.port)  # --port x: its line, not argparse's "invalid int value"
    check_root_path(args.root_path)
    try:
        from dtrain.server.serve import run
    except ImportError as err:
        raise SetupError(f"'dtrain server' needs {err.name}: pip install 'dtrain[server]'") from None
    # the local jobs it could not schedule as submitted (another DTRAIN_GPUS), said before it serves
    if client.config_problem is None:  # a broken config.yaml: each request says so
        warn(client.backend("local").serving_notices())
    home, backend = client.home, args.default_backend  # `dtrain --backend B server`: every request goes to B
    # a plain int: --port 08500 or 8500.0 read as a number keeping its text, which getaddrinfo refuses
    return run(lambda: Client(home=home, backend=backend), home, host=args.host, port=int(args.port),
               read_only=args.read_only, root_path=args.root_path)


def register(sub) -> None:
    p = sub.add_parser("server", help="serve the HTTP API, the web dashboard and Prometheus /metrics")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; any other needs the token)")
    p.add_argument("--port", type=whole_number, default=8500, help="port (default 8500; 0: any free port)")
    p.add_argument("--read-only", action="store_true", help="serve GET requests only")
    p.add_argument("--root-path", default="", metavar="PREFIX",
                   help="the path prefix a proxy in front strips, e.g. /dtrain (the API's address is then "
                        "PREFIX/api/v1 to clients)")
    p.set_defaults(handler=cmd_server)
