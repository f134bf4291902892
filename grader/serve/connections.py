"""The course server's connections: uvicorn's HTTP/1.1 protocol (h11) with the limits it lacks.

uvicorn closes a kept-alive connection that stays quiet after a response (timeout_keep_alive), but
a connection that never finishes its first request's headers stays open for ever, and each one
counts against its connection limit: 2,100 idle TCP connections locked a class out (every request
answered 503) for as long as they stayed open (issue 70). Here (GuardedH11):

- a request's headers arrive whole within HEADERS_S of the connection's start, or of the previous
  response's end, else the connection is closed (its body has course.BODY_TIMEOUT_S, answered 408);
- one address holds at most PER_ADDRESS connections at once; one more is closed as it opens. The
  loopback addresses are exempt: the proxy in front of the server (docs/serve.md) connects from
  one of them for every student, and limits each student's connections itself;
- the server's connections in all are capped (app.run_server's limit_concurrency, answered 503)
  at what its file descriptors allow (connection_limit), well above a class's needs.
"""

from __future__ import annotations

import ipaddress
import resource
from collections import Counter

from uvicorn.protocols.http.h11_impl import H11Protocol

HEADERS_S = 10.0
PER_ADDRESS = 64
CONNECTIONS = 8192          # the most connections at once (fewer where file descriptors are fewer)
_RESERVED_FDS = 256         # the store, the worker's pipes, the log: never taken by connections


def connection_limit(wanted: int = CONNECTIONS) -> int:
    """The server's connection cap: wanted, or fewer where this process's file descriptors (their
    soft limit raised to the hard one first) leave less beside _RESERVED_FDS."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            target = wanted + _RESERVED_FDS if hard == resource.RLIM_INFINITY else hard
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return max(16, min(wanted, soft - _RESERVED_FDS))


def exempt(host: str) -> bool:
    """An address the per-address cap does not apply to: this machine's own (the proxy's)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a time limit on a request's headers and a cap on one address's
    connections (the module's docstring). Class attributes, so that a test can make a stricter one."""

    headers_s: float = HEADERS_S
    per_address: int = PER_ADDRESS
    loopback_exempt: bool = True
    open_by_address: Counter = Counter()      # one server per process: shared by its connections

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._headers_timer = None
        self._address: str | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        host = self.client[0] if self.client else ""
        if not (self.loopback_exempt and exempt(host)) and self.open_by_address[host] >= self.per_address:
            self.transport.close()                      # over its address's cap: closed as it opens
            return
        self._address = host
        self.open_by_address[host] += 1
        self._await_headers()

    def connection_lost(self, exc) -> None:
        if self._address is not None:
            self.open_by_address[self._address] -= 1
            if self.open_by_address[self._address] <= 0:
                del self.open_by_address[self._address]
            self._address = None
        self._cancel_timer()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_headers()                       # the next request's headers: the same limit

    def _await_headers(self) -> None:
        self._cancel_timer()
        self._headers_timer = self.loop.call_later(self.headers_s, self._headers_late)

    def _cancel_timer(self) -> None:
        if self._headers_timer is not None:
            self._headers_timer.cancel()
            self._headers_timer = None

    def _headers_late(self) -> None:
        """Close the connection where no request is being answered: it is still waiting for a
        request's headers, or for the end of an answered request's body it never needed (a body
        dripping after the answer). A request being answered, an event stream, is never cut here."""
        self._headers_timer = None
        if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
            self.transport.close()
