"""A small authoritative DNS server on 127.0.0.1 (UDP), for HAProxy's run-time resolvers
in tests: it answers A queries from a table the test changes while it runs, and NXDOMAIN
for every other name, as a cluster's DNS does for a pod that is gone."""

from __future__ import annotations

import socket
import threading

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset

TTL = 1  # seconds: HAProxy keeps an answer for its own "hold valid" anyway


class DNSServer:
    """``records`` maps a name (``"parley-0.example.local"``) to an IPv4 address; change it
    with :meth:`set` and :meth:`remove`. Stop with :meth:`close`."""

    def __init__(self) -> None:
        self.records: dict[str, str] = {}
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.1)  # to see _stop soon
        self.port: int = self._sock.getsockname()[1]
        self.queries = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="dns", daemon=True)
        self._thread.start()

    def set(self, name: str, address: str) -> None:
        with self._lock:
            self.records[name.rstrip(".").lower()] = address

    def remove(self, name: str) -> None:
        with self._lock:
            self.records.pop(name.rstrip(".").lower(), None)

    def _answer(self, data: bytes) -> bytes:
        query = dns.message.from_wire(data)
        response = dns.message.make_response(query)
        question = query.question[0]
        name = question.name.to_text().rstrip(".").lower()
        with self._lock:
            address = self.records.get(name)
        if address is None:
            response.set_rcode(dns.rcode.NXDOMAIN)
        elif question.rdtype == dns.rdatatype.A:
            response.answer.append(dns.rrset.from_text(question.name, TTL, "IN", "A", address))
        # Any other type for a known name (AAAA): no error, no answer.
        return response.to_wire()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self._sock.recvfrom(4096)
            except TimeoutError:
                continue
            self.queries += 1
            try:
                self._sock.sendto(self._answer(data), peer)
            except Exception:  # a malformed query gets no answer, as from a real server
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()
