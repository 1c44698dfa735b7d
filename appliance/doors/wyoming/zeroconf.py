"""Zeroconf (mDNS) for the Wyoming door, so Home Assistant discovers it: the record
(``_wyoming._tcp.local.``) and the address a listener bound to a host advertises.

Optional: without the ``zeroconf`` package, or on a listener other hosts cannot reach,
the door serves unadvertised (a warning says why).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from typing import TYPE_CHECKING

from appliance import __version__

if TYPE_CHECKING:
    from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

log = logging.getLogger("appliance.doors.wyoming")

SERVICE_TYPE = "_wyoming._tcp.local."


def zeroconf_record(name: str, port: int, addresses: list[str]) -> AsyncServiceInfo:
    """The mDNS record Home Assistant discovers (``_wyoming._tcp.local.``)."""
    from zeroconf.asyncio import AsyncServiceInfo

    return AsyncServiceInfo(
        SERVICE_TYPE,
        f"{name}.{SERVICE_TYPE}",
        parsed_addresses=addresses,
        port=port,
        properties={"version": __version__, "program": "ttsd"},
    )


def advertised_address(host: str) -> str | None:
    """The address to advertise for a listener bound to ``host`` (None: not reachable
    from elsewhere).  A wildcard bind advertises the address of the default route's
    interface (a UDP connect sends nothing)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if ip.is_loopback:
        return None
    if not ip.is_unspecified:
        return host
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("224.0.0.251", 5353))
            return str(s.getsockname()[0])
        except OSError:
            return None


async def advertise(host: str, port: int, name: str) -> AsyncZeroconf | None:
    """Register the door at ``host:port`` as ``name``; what the door closes when it
    closes (None: nothing).  Not advertised, the log says why and serving goes on."""
    address = advertised_address(host)
    if address is None:
        log.warning("wyoming.zeroconf: %s is not reachable from other hosts", host)
        return None
    try:
        from zeroconf.asyncio import AsyncZeroconf
    except ImportError:
        log.warning("wyoming.zeroconf: the zeroconf package is not installed; not advertised")
        return None
    zc = AsyncZeroconf()
    try:
        await zc.async_register_service(zeroconf_record(name, port, [address]))
    except Exception as exc:  # mDNS is a convenience: serving goes on without it
        log.warning("wyoming.zeroconf: not advertised: %s", exc)
        return zc  # still closed with the door
    log.info("wyoming.zeroconf: advertised %s at %s:%d", name, address, port)
    return zc
