"""The daemon's HTTP side: the API, its event stream, its limits, ``/metrics`` and the daemon's run loop.

Holds the FastAPI application (routes, the bearer-token check, the one mapping of engine refusals to HTTP
codes), server-sent events, request and connection limits, the Prometheus exposition and ``serve`` (the
engine and the HTTP server in one event loop).

May import: the leaves, ``devices`` (to pick a backend), ``status`` and ``engine`` (through its public
methods only). Never proving math. See docs/architecture.md.
"""

from .api import ApiSettings, EngineApi, close_streams, create_app
from .daemon import run_daemon, serve
from .limits import bind

__all__ = ["ApiSettings", "EngineApi", "bind", "close_streams", "create_app", "run_daemon", "serve"]
