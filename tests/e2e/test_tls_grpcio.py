#!/usr/bin/env python3
"""Mutual TLS between our programs and python3-grpcio (gRPC core), both ways.

  grpcio dials us   a python3-grpcio ResourceSource client with the test
                    client certificate syncs from mcp-source over mutual
                    TLS (its identity allowed by --allow); one with the
                    denied certificate gets PERMISSION_DENIED; one without
                    a client certificate gets no connection.
  we dial grpcio    mcp-sink dials a python3-grpcio ResourceSource server
                    that requires client certificates: it syncs, and the
                    server saw the sink's SPIFFE identity in its auth
                    context and the sink's ACK.

The messages are written and read with a few lines of protobuf wire format
(the fields of seeds' RequestResources and Resources), so that only
python3-grpcio is needed. Certificates: tests/gen_certs.sh (openssl).

Usage: test_tls_grpcio.py --build-dir BUILD [--transport grpc|h2c]

Exits 77 (skipped, for meson) without openssl, python3-grpcio or the
transport.
"""

import os
import queue
import sys
import threading
import unittest
from concurrent import futures

import e2e_common as common
from e2e_common import VS

try:
    import grpc
except ImportError:  # checked in main()
    grpc = None

SKIP = 77
WAIT = 20.0
CERTS = None
SINK_A = "spiffe://cluster.local/ns/default/sa/sink-a"
ISTIOD = "spiffe://cluster.local/ns/istio-system/sa/istiod"
SOURCE_METHOD = "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream"


def cert(name):
    return os.path.join(CERTS, name)


def read(name):
    with open(cert(name), "rb") as f:
        return f.read()


# --------------------------------------------------------------------------
# Protobuf wire format, the little needed
# --------------------------------------------------------------------------

def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, value):
    """A length-delimited field (strings and messages)."""
    if isinstance(value, str):
        value = value.encode()
    return varint(num << 3 | 2) + varint(len(value)) + value


def decode(buf):
    """{field number: [bytes or int]} of one message."""
    out, i = {}, 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = read_varint(buf, i)
        elif wire == 2:
            n, i = read_varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wire == 1:
            v, i = buf[i:i + 8], i + 8
        elif wire == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wire)
        out.setdefault(num, []).append(v)
    return out


def read_varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def request(collection, nonce=""):
    """RequestResources: sink_node{id}=1, collection=2, response_nonce=4."""
    msg = field(1, field(1, "python-grpcio")) + field(2, collection)
    if nonce:
        msg += field(4, nonce)
    return msg


def text(fields, num):
    return fields.get(num, [b""])[0].decode()


# --------------------------------------------------------------------------

class Base(common.Base):
    WAIT = WAIT
    TMP_PREFIX = "mcp-tls-grpcio-"

    def setUp(self):
        super().setUp()
        with open(os.path.join(self.config, "vs.yaml"), "w") as f:
            f.write("apiVersion: networking.istio.io/v1alpha3\n"
                    "kind: VirtualService\n"
                    "metadata: {name: reviews, namespace: default}\n"
                    "spec: {hosts: [reviews]}\n")

    def mtls(self, name):
        return ["--tls-cert", cert(name + ".pem"), "--tls-key",
                cert(name + ".key"), "--tls-ca", cert("ca.pem")]


class GrpcioDialsUs(Base):

    def source(self):
        p = self.start("mcp-source", ["--dir", self.config, "--listen",
                                      self.addr, "--allow", SINK_A] +
                       self.mtls("server"))
        self.wait_for(lambda: "serving ResourceSource on" in p.stderr(),
                      "the source to listen", p)
        return p

    def channel(self, leaf):
        creds = grpc.ssl_channel_credentials(
            root_certificates=read("ca.pem"),
            private_key=read(leaf + ".key") if leaf else None,
            certificate_chain=read(leaf + ".pem") if leaf else None)
        return grpc.secure_channel(self.addr, creds)

    def first_push(self, leaf):
        """The first Resources a grpcio client presenting |leaf| gets for
        VS, and the client's ACK of it; or the RpcError."""
        ch = self.channel(leaf)
        try:
            call = ch.stream_stream(SOURCE_METHOD)
            out = queue.Queue()
            out.put(request(VS))

            def reqs():
                while True:
                    m = out.get()
                    if m is None:
                        return
                    yield m
            stream = call(reqs(), timeout=WAIT)
            try:
                for raw in stream:
                    resp = decode(raw)
                    out.put(request(VS, text(resp, 5)))  # the ACK
                    return resp
            except grpc.RpcError as e:
                return e
            finally:
                out.put(None)
                stream.cancel()
        finally:
            ch.close()

    def test_mutual_tls_sync(self):
        src = self.source()
        resp = self.first_push("client")
        self.assertIsInstance(resp, dict, getattr(resp, "details",
                                                  lambda: "")())
        self.assertEqual(text(resp, 2), VS)
        self.assertEqual(len(resp.get(3, [])), 1)  # default/reviews
        self.wait_for(lambda: "(identity %s)" % SINK_A in src.stderr(),
                      "the source to log the client's identity", src)

    def test_denied_identity(self):
        self.source()
        err = self.first_push("denied")
        self.assertIsInstance(err, grpc.RpcError)
        self.assertEqual(err.code(), grpc.StatusCode.PERMISSION_DENIED,
                         err.details())

    def test_no_client_certificate(self):
        self.source()
        err = self.first_push(None)
        self.assertIsInstance(err, grpc.RpcError)
        self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE,
                         err.details())


class WeDialGrpcio(Base):

    def test_sink_dials_grpcio_source(self):
        seen = {"identities": None, "acked": threading.Event()}

        def stream(requests, context):
            ctx = context.auth_context()
            seen["identities"] = [v.decode() for v in ctx.get(
                "x509_subject_alternative_name", [])]
            seen["security"] = [v.decode() for v in ctx.get(
                "transport_security_type", [])]
            for raw in requests:
                req = decode(raw)
                nonce = text(req, 4)
                if not nonce:  # the subscription: an empty full state
                    yield (field(1, "v1") + field(2, text(req, 2)) +
                           field(5, "n1"))
                elif nonce == "n1" and 5 not in req:
                    seen["acked"].set()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "istio.mcp.v1alpha1.ResourceSource",
            {"EstablishResourceStream":
             grpc.stream_stream_rpc_method_handler(stream)}),))
        creds = grpc.ssl_server_credentials(
            [(read("server.key"), read("server.pem"))],
            root_certificates=read("ca.pem"), require_client_auth=True)
        port = server.add_secure_port("127.0.0.1:0", creds)
        server.start()
        try:
            snk = self.start("mcp-sink", ["--collection", VS, "--json",
                                          "--connect", "127.0.0.1:%d" % port,
                                          "--allow", ISTIOD] +
                             self.mtls("client"))
            self.wait_for(lambda: snk.events("synced"), "the sink to sync",
                          snk)
            self.assertTrue(seen["acked"].wait(WAIT), "no ACK")
            self.assertEqual(seen["security"], ["ssl"])
            self.assertIn(SINK_A, seen["identities"])
        finally:
            server.stop(0)


def main():
    argv = common.parse_args(__doc__.splitlines()[0])
    if grpc is None:
        print("python3-grpcio is not installed")
        return SKIP
    if not common.transport_built(common.TRANSPORT, timeout=WAIT):
        print("the programs have no %s transport" % common.TRANSPORT)
        return SKIP

    def use(d):
        global CERTS
        CERTS = d
    return common.run_with_certs(argv, use)


if __name__ == "__main__":
    sys.exit(main())
