#!/usr/bin/python3
"""A sink that claims a large SinkNode, on many streams at once.

Opens STREAMS ResourceSource streams (or AggregatedMeshConfigService ones)
to a source, sends on each one request for COLLECTION whose SinkNode has an
id of ID_BYTES bytes and ANNOTATIONS annotations of VALUE_BYTES-byte
values, and reads each stream until its first response or its end. Prints
one JSON line: {"ok": streams answered, "ended": {status name: count},
"details": [first details seen]}, then keeps the answered streams open
until its standard input closes (or --hold seconds pass), so that the
source holds them meanwhile.

The messages are encoded by hand: grpcio is the only dependency (Debian's
/usr/bin/python3 has it). Used by tests/e2e/test_ops.py (issue 12, point
3) and for the measurements in docs/security.md.

Usage: sinknode_flood.py --target HOST:PORT [--streams N] [--id-bytes B]
       [--annotations K] [--value-bytes V] [--collection C]
       [--api resource|aggregated] [--hold SECONDS] [--timeout SECONDS]
"""

import argparse
import faulthandler
import os
import json
import queue
import sys
import threading
import time

import grpc


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, payload):
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def sink_node(id_bytes, annotations, value_bytes):
    node = field(1, b"n" * id_bytes)
    for i in range(annotations):
        entry = field(1, b"k%d" % i) + field(2, b"v" * value_bytes)
        node += field(2, entry)
    return node


def request(api, node, collection, nonce=b""):
    if api == "aggregated":  # MeshConfigRequest: sink_node 2, type_url 3,
        return (field(2, node) + field(3, collection.encode()) +  # nonce 4
                (field(4, nonce) if nonce else b""))
    return (field(1, node) + field(2, collection.encode()) +  # RequestResources
            (field(4, nonce) if nonce else b""))  # response_nonce 4


def nonce_of(api, response):
    """The nonce of a Resources (field 5) or MeshConfigResponse (field 4)."""
    want, i, nonce = 4 if api == "aggregated" else 5, 0, b""
    while i < len(response):
        key, i = read_varint(response, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            _, i = read_varint(response, i)
        elif wt == 2:
            n, i = read_varint(response, i)
            if num == want:
                nonce = response[i:i + n]
            i += n
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise ValueError("wire type %d" % wt)
    return nonce


def read_varint(b, i):
    n, shift = 0, 0
    while True:
        n |= (b[i] & 0x7F) << shift
        i += 1
        if b[i - 1] < 0x80:
            return n, i
        shift += 7


METHODS = {
    "resource": "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream",
    "aggregated": "/istio.mcp.v1alpha1.AggregatedMeshConfigService/"
                  "StreamAggregatedResources",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--id-bytes", type=int, default=16)
    ap.add_argument("--annotations", type=int, default=0)
    ap.add_argument("--value-bytes", type=int, default=0)
    ap.add_argument("--collection", default="c")
    ap.add_argument("--api", choices=sorted(METHODS), default="resource")
    ap.add_argument("--hold", type=float, default=60.0)
    ap.add_argument("--timeout", type=float, default=60.0)
    a = ap.parse_args()
    if os.environ.get("FLOOD_TRACE"):  # where it hangs, if it does
        faulthandler.dump_traceback_later(
            a.timeout, file=open(os.environ["FLOOD_TRACE"], "w"), exit=True)

    msg = request(a.api, sink_node(a.id_bytes, a.annotations, a.value_bytes),
                  a.collection)
    # 50 streams per connection: HTTP/2 servers allow 100 at once (h2c).
    channels, calls_of = [], []
    for _ in range((a.streams + 49) // 50):
        ch = grpc.insecure_channel(a.target, options=[
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", -1),
            ("grpc.use_local_subchannel_pool", 1)])  # a connection each
        grpc.channel_ready_future(ch).result(timeout=a.timeout)
        channels.append(ch)
        calls_of.append(ch.stream_stream(METHODS[a.api],
                                         request_serializer=lambda b: b,
                                         response_deserializer=lambda b: b))
    stop = threading.Event()
    results = queue.Queue()
    calls = []

    # Each stream ACKs its first push (the source's admission then gives
    # its slot to the next stream) and stays open until we are done.
    def requests(acks):
        yield msg
        ack = acks.get()
        if ack is not None:
            yield ack
        stop.wait()

    def run(c, acks):
        try:
            resp = next(c)
            acks.put(request(a.api, b"", a.collection, nonce_of(a.api, resp)))
            results.put(("OK", ""))
        except StopIteration:
            acks.put(None)
            results.put(("OK_EMPTY", ""))
        except grpc.RpcError as e:
            acks.put(None)
            results.put((e.code().name, e.details() or ""))

    for i in range(a.streams):
        acks = queue.Queue()
        c = calls_of[i // 50](requests(acks))
        calls.append(c)
        threading.Thread(target=run, args=(c, acks), daemon=True).start()

    ok, ended, details = 0, {}, []
    deadline = time.monotonic() + a.timeout
    for _ in range(a.streams):
        try:
            name, det = results.get(timeout=max(0.1, deadline -
                                                time.monotonic()))
        except queue.Empty:
            ended["NO_ANSWER"] = ended.get("NO_ANSWER", 0) + 1
            continue
        if name == "OK":
            ok += 1
        else:
            ended[name] = ended.get(name, 0) + 1
            if det and len(details) < 3:
                details.append(det)
    print(json.dumps({"ok": ok, "ended": ended, "details": details}),
          flush=True)

    # Hold the answered streams until stdin closes or --hold passes.
    waiter = threading.Thread(target=sys.stdin.read, daemon=True)
    waiter.start()
    waiter.join(a.hold)
    stop.set()
    for c in calls:
        c.cancel()
    for ch in channels:
        ch.close()


if __name__ == "__main__":
    main()
