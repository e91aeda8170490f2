"""Run an Arize Phoenix server with every listening socket on 127.0.0.1 (used by tests/backends/phoenix_server.py).

Phoenix binds its OTLP/gRPC port to [::] (all interfaces) with no setting to change it;
we rewrite that bind address to loopback before the server starts. The HTTP port follows
PHOENIX_HOST. Run as: python phoenix_launcher.py  (configuration comes from PHOENIX_* env vars)
"""

from __future__ import annotations

import sys

import grpc.aio


def _loopback(add_port):  # type: ignore[no-untyped-def]
    def bind(self, address, *args, **kwargs):  # type: ignore[no-untyped-def]
        port = address.rsplit(":", 1)[-1]
        return add_port(self, f"127.0.0.1:{port}", *args, **kwargs)

    return bind


def main() -> None:
    server_cls = type(grpc.aio.server())
    server_cls.add_insecure_port = _loopback(server_cls.add_insecure_port)
    server_cls.add_secure_port = _loopback(server_cls.add_secure_port)
    from phoenix.server.main import main as phoenix_main

    sys.argv = ["phoenix", "serve"]
    phoenix_main()


if __name__ == "__main__":
    main()
