"""An istiod-like xDS client in python grpcio, written from Istio's
pkg/adsc/adsc.go and the Envoy protos (proto/envoy, verbatim), independent
of libmcp: what test_interop_xds.py and tests/e2e/test_xds.py dial our
mcp-source with.

As adsc does:
  - one StreamAggregatedResources (or DeltaAggregatedResources) stream;
  - the initial requests: MeshConfig first, then every config type
    (ConfigInitialRequests), each with response_nonce = a timestamp string
    (adsc's Send() sets time.Now().String()), the node on the first only;
  - each response: every resource's Any decoded (istio.mcp.v1alpha1.Resource,
    its body unpacked into the real Istio message by its type URL; a
    MeshConfig's Any is the MeshConfig itself), then an ACK echoing nonce
    and version_info (or, when asked, a NACK with error_detail);
  - HasSynced(): a response seen for every type asked for.
Delta keeps what it holds (name -> version per type) across streams and
sends it as initial_resource_versions when it reconnects.

The descriptors come from protoc (protobuf-compiler) at run time:
descriptor_set() compiles the Envoy ADS closure, MCP's Resource and Istio's
networking and security protos of proto/ into one FileDescriptorSet.
"""

import datetime
import os
import queue
import subprocess
import tempfile
import threading

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, '..', '..'))
PROTO = os.path.join(ROOT, 'proto')

SOTW = '/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources'
DELTA = '/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources'
RESOURCE_ANY = 'type.googleapis.com/istio.mcp.v1alpha1.Resource'
MESH = 'mesh.istio.io/v1alpha1/MeshConfig'

# collections.Pilot of the Istio release whose types libmcp builds in (1.6
# names; the newer spellings are aliases, docs/schema.md).
PILOT_TYPES = [
    'networking.istio.io/v1alpha3/DestinationRule',
    'networking.istio.io/v1alpha3/EnvoyFilter',
    'networking.istio.io/v1alpha3/Gateway',
    'networking.istio.io/v1alpha3/ServiceEntry',
    'networking.istio.io/v1alpha3/Sidecar',
    'networking.istio.io/v1alpha3/VirtualService',
    'networking.istio.io/v1alpha3/WorkloadEntry',
    'security.istio.io/v1beta1/AuthorizationPolicy',
    'security.istio.io/v1beta1/PeerAuthentication',
    'security.istio.io/v1beta1/RequestAuthentication',
]


def config_initial_types(extra=()):
    """adsc.ConfigInitialRequests(): MeshConfig, then the Pilot types."""
    return [MESH] + PILOT_TYPES + list(extra)


_types = None


def descriptor_set():
    """The FileDescriptorSet bytes (protoc, once per process)."""
    files = ['envoy/service/discovery/v3/ads.proto', 'mcp/v1alpha1/resource.proto']
    for d in ('networking/v1alpha3', 'security/v1beta1'):
        for f in sorted(os.listdir(os.path.join(PROTO, 'istio', d))):
            if f.endswith('.proto'):
                files.append(d + '/' + f)
    with tempfile.TemporaryDirectory() as t:
        out = os.path.join(t, 'set.pb')
        subprocess.run(['protoc', '-I', os.path.join(PROTO, 'envoy'), '-I', PROTO,
                        '-I', os.path.join(PROTO, 'istio'), '-I', '/usr/include',
                        '--include_imports', '--descriptor_set_out=' + out] + files,
                       check=True, capture_output=True)
        with open(out, 'rb') as f:
            return f.read()


class Types:
    """Message classes by full name, from descriptor_set()."""

    def __init__(self):
        fds = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set())
        self.pool = descriptor_pool.DescriptorPool()
        for f in fds.file:
            self.pool.Add(f)
        self._factory = None
        self._cache = {}

    def get(self, name):
        if name not in self._cache:
            d = self.pool.FindMessageTypeByName(name)
            if hasattr(message_factory, 'GetMessageClass'):
                self._cache[name] = message_factory.GetMessageClass(d)
            else:
                if self._factory is None:
                    self._factory = message_factory.MessageFactory(self.pool)
                self._cache[name] = self._factory.GetPrototype(d)
        return self._cache[name]


def types():
    global _types
    if _types is None:
        _types = Types()
    return _types


def timestamp_nonce():
    """What adsc's Send() puts in response_nonce: Go's time.Now().String()."""
    return datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S.%f +0000 UTC m=+0.000000001')


class Decoded:
    """One resource of a response, decoded as adsc's handleMCP does."""

    def __init__(self, name, version, type_url, body):
        self.name, self.version, self.type_url, self.body = name, version, type_url, body

    def __repr__(self):
        return f'{self.name}@{self.version} ({self.type_url})'


def decode_any(any_msg, delta_name=None, delta_version=None):
    t = types()
    if any_msg.type_url != RESOURCE_ANY:
        # MeshConfig (apigen: the body's own Any).
        return Decoded(delta_name or '', delta_version or '', any_msg.type_url, any_msg.value)
    res = t.get('istio.mcp.v1alpha1.Resource').FromString(any_msg.value)
    body = None
    if res.body.type_url:
        cls = t.get(res.body.type_url.split('/')[-1])
        body = cls.FromString(res.body.value)  # the real Istio type
    if delta_name is not None and delta_name != res.metadata.name:
        raise AssertionError(f'delta name {delta_name} != metadata.name {res.metadata.name}')
    nsn = res.metadata.name.split('/')
    if len(nsn) != 2:  # adsc's mcpToPilot: "invalid name"
        raise AssertionError(f'invalid name {res.metadata.name}')
    return Decoded(res.metadata.name, res.metadata.version, res.body.type_url, body)


class Response:
    def __init__(self, msg, delta):
        self.msg, self.delta = msg, delta
        self.type_url = msg.type_url
        self.nonce = msg.nonce
        self.version = msg.system_version_info if delta else msg.version_info
        if delta:
            self.resources = [decode_any(r.resource, r.name, r.version) for r in msg.resources]
            self.removed = list(msg.removed_resources)
        else:
            self.resources = [decode_any(a) for a in msg.resources]
            self.removed = []

    def names(self):
        return sorted(r.name for r in self.resources)

    def get(self, name):
        for r in self.resources:
            if r.name == name:
                return r
        return None


class Adsc:
    """One stream at a time; held state (delta) survives reconnects."""

    def __init__(self, target, delta=False, node_id='sidecar~10.0.0.1~istiod-test.istio-system~istio-system.svc.cluster.local',
                 metadata=None, credentials=None):
        self.target, self.delta = target, delta
        self.node_id = node_id
        self.metadata = metadata or {'GENERATOR': 'api', 'ISTIO_VERSION': '65536.65536.65536',
                                     'NAMESPACE': 'istio-system'}
        self.credentials = credentials
        self.held = {}  # delta: type_url -> {name: version}
        self.synced = set()
        self.channel = None
        self.call = None

    def _node(self):
        t = types()
        node = t.get('envoy.config.core.v3.Node')()
        node.id = self.node_id
        for k, v in self.metadata.items():
            node.metadata.fields[k].string_value = v
        return node

    def start(self, type_urls, nonce=timestamp_nonce, names=None):
        """Opens a stream and sends the initial request of each type."""
        if self.channel is None:
            if self.credentials:
                self.channel = grpc.secure_channel(self.target, self.credentials)
            else:
                self.channel = grpc.insecure_channel(self.target)
        t = types()
        if self.delta:
            req_cls = t.get('envoy.service.discovery.v3.DeltaDiscoveryRequest')
            resp_cls = t.get('envoy.service.discovery.v3.DeltaDiscoveryResponse')
            method = DELTA
        else:
            req_cls = t.get('envoy.service.discovery.v3.DiscoveryRequest')
            resp_cls = t.get('envoy.service.discovery.v3.DiscoveryResponse')
            method = SOTW
        self.req_cls = req_cls
        self.out = queue.Queue()
        self.responses = queue.Queue()
        self.error = None
        self.requested = list(type_urls)
        self.synced = set()

        def gen():
            while True:
                r = self.out.get()
                if r is None:
                    return
                yield r

        stub = self.channel.stream_stream(method, request_serializer=lambda m: m.SerializeToString(),
                                          response_deserializer=resp_cls.FromString)
        self.call = stub(gen())

        def reader(call, responses):
            try:
                for m in call:
                    responses.put(m)
            except grpc.RpcError as e:
                responses.put(e)
            responses.put(None)

        threading.Thread(target=reader, args=(self.call, self.responses), daemon=True).start()
        first = True
        for tu in type_urls:
            r = req_cls(type_url=tu)
            if first:  # adsc: the node on the first request of a stream
                r.node.CopyFrom(self._node())
                first = False
            if not self.delta:
                r.response_nonce = nonce()
                if names:
                    r.resource_names.extend(names)
            else:
                if names:
                    r.resource_names_subscribe.extend(names)
                for n, v in self.held.get(tu, {}).items():
                    r.initial_resource_versions[n] = v
            self.out.put(r)

    def recv(self, timeout):
        """The next response (decoded), or raises: grpc.RpcError when the
        stream ended with a status, queue.Empty on timeout."""
        m = self.responses.get(timeout=timeout)
        if m is None:
            raise EOFError('the stream ended')
        if isinstance(m, grpc.RpcError):
            self.error = m
            raise m
        r = Response(m, self.delta)
        self.synced.add(r.type_url)
        return r

    def answer(self, resp, nack=None):
        """ACK (or NACK with |nack| as the message) |resp|; a delta ACK
        updates what is held, a NACK keeps it."""
        r = self.req_cls(type_url=resp.type_url, response_nonce=resp.nonce)
        if not self.delta:
            r.version_info = resp.version
        if nack is not None:
            r.error_detail.code = 3
            r.error_detail.message = nack
        elif self.delta:
            h = self.held.setdefault(resp.type_url, {})
            for d in resp.resources:
                h[d.name] = d.version
            for n in resp.removed:
                h.pop(n, None)
        self.out.put(r)

    def send(self, **kw):
        self.out.put(self.req_cls(**kw))

    def has_synced(self):
        return all(t in self.synced for t in self.requested)

    def stop(self):
        if self.call is not None:
            self.out.put(None)
            self.call.cancel()
            self.call = None

    def close(self):
        self.stop()
        if self.channel is not None:
            self.channel.close()
            self.channel = None
