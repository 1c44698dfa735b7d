"""The protocol v1 client library, where users' code imports it from.

``from appliance.client import Client, AsyncClient`` keeps working: the library lives in
:mod:`appliance.clients.client` (the clients layer); this module only names it here.
"""

from appliance.clients.client import (
    AsyncClient,
    AsyncTextStream,
    BusyError,
    Client,
    Synthesis,
    TextStream,
    TtsdError,
    collect,
    decoder,
    encode,
    is_refused,
    resolve_socket,
)

__all__ = [
    "AsyncClient",
    "AsyncTextStream",
    "BusyError",
    "Client",
    "Synthesis",
    "TextStream",
    "TtsdError",
    "collect",
    "decoder",
    "encode",
    "is_refused",
    "resolve_socket",
]
