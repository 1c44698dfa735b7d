"""How a request ends: exactly once, decided in one place for every door.

A door's request body (map the message, open the stream, run it, build the end event)
raises what it raises; :func:`settle` turns that into one :data:`Ending`, the same on
every door:

==========================  ==================  =========================================
the body                    ending              told to the client (by the door's wire)
==========================  ==================  =========================================
returns ``value``           ``Done(value)``     the door's end event, made from ``value``
raises ServiceError         ``Failed(error)``   that error (the core counted what it raised)
raises ClientTooSlow        ``Lost(True)``      ``client_too_slow``, then the connection goes
raises ConnectionError …    ``Lost()``          nothing: no one is there to tell
raises anything else        ``Failed(internal)``  ``internal``; the log has why (throttled)
==========================  ==================  =========================================

:class:`Report` is a door's log of failures (a bug's traceback once, then one line per
kind every 10 s) and its error counts.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from appliance.doors.net import ClientTooSlow
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.logsetup import Throttle

T = TypeVar("T")


@dataclass(frozen=True)
class Done(Generic[T]):
    """The body finished: ``value`` is what the door's end event is made from."""

    value: T


@dataclass(frozen=True)
class Failed:
    """The request ends with ``error``."""

    error: ServiceError


@dataclass(frozen=True)
class Lost:
    """The client is gone (``too_slow``: it stopped reading); nothing more reaches it."""

    too_slow: bool = False


Ending = Done[T] | Failed | Lost


class Report:
    """A door's log of failing requests and clients, and the errors it counts.

    Lines are throttled per kind (:class:`~appliance.ops.logsetup.Throttle`: a bug's
    traceback the first time, then one line per 10 s), so a client that fails requests
    as fast as it can fills neither the journal nor a CPU."""

    def __init__(self, count: Callable[[str], None], logger: logging.Logger, door: str) -> None:
        self._count = count
        """Counts an error by its code (the core's ``record_error``: ``stats`` shows it)."""
        self.log = logger
        self.door = door
        self._throttle = Throttle()

    def count(self, code: str) -> None:
        self._count(code)

    def internal(self, exc: BaseException, where: str, whose: str = "") -> ServiceError:
        """A bug on a request's path: logged and counted; the error it ends with."""
        self._throttle.log(
            self.log,
            logging.ERROR,
            f"internal:{where}",
            "%s%s: %s failed (%s): it ends with internal",
            self.door,
            f" {whose}" if whose else "",
            where,
            type(exc).__name__,
            exc_info=exc,
        )
        self.count(ErrorCode.INTERNAL)
        return ServiceError(ErrorCode.INTERNAL, f"internal error ({where})")

    def throttled(
        self, level: int, kind: str, msg: str, *args: object, exc_info: BaseException | None = None
    ) -> None:
        """One line of ``kind`` every 10 s at most (``exc_info``'s traceback the first time)."""
        self._throttle.log(self.log, level, kind, msg, *args, exc_info=exc_info)


async def settle(body: Awaitable[T], report: Report, where: str, whose: str = "") -> Ending[T]:
    """Await ``body`` and say how the request ended (the table in the module doc)."""
    try:
        return Done(await body)
    except ServiceError as exc:
        return Failed(exc)
    except ClientTooSlow:
        return Lost(too_slow=True)
    except (ConnectionError, OSError):
        return Lost()
    except Exception as exc:  # the boundary of one request: a bug ends it, not its door
        return Failed(report.internal(exc, where, whose))
