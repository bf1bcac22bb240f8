"""`dtrain server`: the HTTP API, the dashboard and Prometheus /metrics (optional extra 'server')."""

from __future__ import annotations

from dtrain.cli.jobs import whole_number
from dtrain.client import Client
from dtrain.errors import EnvironmentError_
from dtrain.names import check_port


def cmd_server(args, client: Client) -> int:
    check_port(args.port)  # --port x: its line, not argparse's "invalid int value"
    try:
        from dtrain.server.serve import run
    except ImportError as err:
        raise EnvironmentError_(f"'dtrain server' needs {err.name}: pip install 'dtrain[server]'") from None
    home, backend = client.home, args.default_backend  # `dtrain --backend B server`: every request goes to B
    return run(lambda: Client(home=home, backend=backend), home, host=args.host, port=args.port,
               read_only=args.read_only)


def register(sub) -> None:
    p = sub.add_parser("server", help="serve the HTTP API, the web dashboard and Prometheus /metrics")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; any other needs the token)")
    p.add_argument("--port", type=whole_number, default=8500, help="port (default 8500; 0: any free port)")
    p.add_argument("--read-only", action="store_true", help="serve GET requests only")
    p.set_defaults(handler=cmd_server)
