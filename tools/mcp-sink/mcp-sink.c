/*
 * mcp-sink: subscribes to MCP collections, dialing a source
 * (ResourceSource) or serving one that dials us (ResourceSink); prints every
 * response as a JSON line (--json) and mirrors what it holds into files
 * (--out).
 *
 * Threads: the main thread runs a libuv loop (signals, the exit after sync).
 * The sink state lives where the transport runs (gRPC: a thread of its
 * own), and so do the core's apply and event callbacks, which do all the
 * output: the mirror files, the JSON lines (stdout, each line written whole
 * under stdout's lock) and the logs. They tell the main loop about the sync
 * through a uv_async_t.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "cli/args.h"
#include "cli/endpoint.h"
#include "util/log.h"
#include "cli/proc.h"
#include "mcp-sink/mirror.h"
#include "ops/buf.h"
#include "ops/ops.h"
#include "util/rand.h"
#include "cli/schema_args.h"
#include "mcp-sink/sink_proto.h"
#include "transport/transport.h"

#define DEFAULT_ADDRESS "127.0.0.1:9901"
#define DEFAULT_NODE_ID "mcp-sink"
/* --exit-after-sync waits at most this long for the last ACK to be sent,
 * then at most FINISH_WAIT_MS for the stream to end (both are events: the
 * transport ends the stream after the answers). */
#define FLUSH_WAIT_MS 1000
#define FINISH_WAIT_MS 2000
/* --sync-warn: seconds without the first response of a collection before
 * a warning names it. */
#define DEFAULT_SYNC_WARN_S 10
#define MAX_SYNC_S 86400

typedef struct sink_app {
  uv_loop_t loop;
  const tool_transport *tp;
  void *ep;
  mcp_sink_state *state;
  tool_ops *ops; /* metrics and debug endpoints (tools/ops) */
  tool_access *access; /* --allow, --deny, --access-list; NULL: none */
  tool_tls_watch *tls_watch; /* a broken replacement of the TLS files is said */
  tool_mirror *mirror;
  mcp_schema *schema; /* --out's typed bodies: Istio's, --descriptor-set */
  int json, exit_after_sync;
  const char *const *colls;
  size_t ncolls;
  const char *address; /* --connect or --listen */
  int cleartext_dial;  /* --connect without TLS: hint when it speaks TLS */
  uv_signal_t sigint, sigterm;
  uv_async_t synced_async;
  uv_async_t ended_async; /* the finished stream ended (on_stream) */
  uv_timer_t flush; /* --exit-after-sync: the stream did not end in time */
  uv_timer_t sync_warn, sync_timeout; /* --sync-warn, --sync-timeout */
  uint64_t sync_warn_ms, sync_timeout_ms, started; /* started: uv_now() */
  int stopping, timed_out;
  int dialing;   /* --connect */
  atomic_int finishing; /* the stream was finished (sink_finish) */
  atomic_int quitting;   /* stop() began: a dial ending now is no failure */
  atomic_int connected;  /* a stream is connected now */
  atomic_uchar *acked;   /* per requested collection: an ACKED_* */

  /* Transport thread only. */
  int probed; /* the TLS probe ran */
  int synced;
  uint64_t stream; /* id of the current stream */
  char *peer;      /* its peer */
  int announced;   /* "connected" was reported for it */
  int dial_failing; /* the status the failing dials end with, 0: none */
} sink_app;

static void usage(FILE *f) {
  fputs("usage: mcp-sink --collection NAME... [--connect HOST:PORT[,...] | --listen "
        "HOST:PORT]\n"
        "                [--transport h2|grpc] [--incremental] [--node-id ID]\n"
        "                [--annotation KEY=VALUE]... [--out DIR] [--json]\n"
        "                [--exit-after-sync] [--log-level LEVEL]\n"
        "                [--api resource|aggregated|aggregated-incremental]\n"
        "                [--log-format text|json] [--debug-listen HOST:PORT]\n"
        TOOL_SEC_SYNOPSIS("                ")
        "                [--sync-warn SECONDS] [--sync-timeout SECONDS]\n"
        "                [--descriptor-set FILE]...\n"
        "       " TOOL_SINK_PROTO_SYNOPSIS
        "\n"
        "Subscribes to MCP collections and reports what it receives.\n"
        "\n"
        "  --collection NAME     a collection to subscribe to (repeatable; at "
        "least one)\n"
        "  --connect HOST:PORT   dial a ResourceSource, reconnecting forever;\n"
        "                        a list A,B,C (replicas) is dialed in turn\n"
        "                        (default " DEFAULT_ADDRESS ")\n"
        "  --listen HOST:PORT    serve ResourceSink: sources dial us\n"
        "  --transport NAME      h2 (nghttp2; TLS with the --tls-* flags,\n"
        "                        else cleartext h2c; also named h2c) or grpc\n"
        "                        (gRPC core); default: h2 to --listen, grpc\n"
        "                        to dial. Expose only h2: a gRPC core 1.51\n"
        "                        listener is still open to rapid reset and\n"
        "                        CONTINUATION floods (docs/security.md)\n"
        "  --incremental         ask for incremental pushes\n"
        "  --api API             resource (default): ResourceSource/ResourceSink;\n"
        "                        aggregated, aggregated-incremental: dial the\n"
        "                        AggregatedMeshConfigService (--connect only);\n"
        "                        each --collection is then a type URL;\n"
        "                        destination: Conduit's Destination/Get, one\n"
        "                        stream per --destination AUTHORITY (host[:port])\n"
        "                        --json: {\"event\":\"destination\",\"authority\",\n"
        "                        \"update\",\"addrs\",\"exists\",\"total\"}; --out DIR:\n"
        "                        DIR/<authority>.json {\"exists\",\"addrs\"};\n"
        "                        dispatcher: a swarmkit worker --node-id NODE\n"
        "                        (Session, Heartbeat, Assignments); --json: one\n"
        "                        {\"event\":\"assignments\",...} per message; --out\n"
        "                        DIR: DIR/<kind>s/<id>.json; --report-status STATE\n"
        "                        takes every task held through swarmkit's\n"
        "                        controller states up to STATE, reporting each\n"
        "                        (ACCEPTED, PREPARING, READY, STARTING, RUNNING,\n"
        "                        COMPLETE) with a message and a timestamp\n"
        "                        xds: MCP over xDS, as istiod dials it: every\n"
        "                        --type GROUP/VERSION/KIND (default: MeshConfig\n"
        "                        and every Istio type known), --delta for\n"
        "                        DeltaAggregatedResources; --json: one\n"
        "                        {\"event\":\"response\",...} per response\n"
        "  --node-id ID          SinkNode.id (default " DEFAULT_NODE_ID ")\n"
        "  --annotation KEY=VALUE  a SinkNode annotation (repeatable)\n"
        "  --out DIR             mirror what is held into "
        "DIR/<collection>/<name>.json\n"
        "  --json                print each response as a JSON line on stdout\n"
        "  --exit-after-sync     exit 0 once every collection was received "
        "and ACKed\n"
        , f);
  fputs(
        "  --listen, --connect   also take unix:PATH, a unix socket\n"
        "  --sync-warn SECONDS   warn, naming them, when collections are not\n"
        "                        received after SECONDS (default 10; 0: "
        "never)\n"
        "  --sync-timeout SECONDS  exit 3 when not synced after SECONDS\n"
        "  --log-level LEVEL     error, warn, info (default) or debug\n"
        "  --log-format FORMAT   text (default) or json: one object per line\n"
        "  --debug-listen HOST:PORT  serve /metrics, /debug/syncz,\n"
        "                        /debug/journal, /healthz and /readyz over HTTP\n"
        "  --tls-cert FILE       our certificate chain (PEM)\n"
        "  --tls-key FILE        its private key (PEM)\n"
        "  --tls-ca FILE         CA certificates (PEM) that verify the peer; "
        "when\n"
        "                        listening, clients must present a "
        "certificate\n"
        "  --tls-server-name NAME  --connect: the name the source's "
        "certificate\n"
        "                        must carry instead of the host dialed\n"
        "  --allow ID            allow a peer identity (SPIFFE ID, DNS name, "
        "CN;\n"
        "                        a prefix ending in '*'); repeatable\n"
        "  --deny ID             deny a peer identity; repeatable\n"
        "  --access-list FILE    rules, one per line (\"allow ID\", \"deny "
        "ID\");\n"
        "                        read again when it changes and on SIGHUP\n"
        "  --allow-cleartext     let h2 listen without TLS on an address that "
        "is not loopback\n"
        "  --max-streams-per-connection N  --listen: calls one connection\n"
        "                        may hold at once (default 1024; h2 refuses\n"
        "                        more with RESOURCE_EXHAUSTED, gRPC core\n"
        "                        queues them)\n"
        "  --stream-rate PER_S[,BURST]  --listen: new streams one peer (its\n"
        "                        verified identity, else its address) may\n"
        "                        open: PER_S a second after a burst of\n"
        "                        BURST (default 100,100); past it a stream\n"
        "                        waits for a token, or past a quarter of the\n"
        "                        burst waiting is refused RESOURCE_EXHAUSTED;\n"
        "                        off: no per-peer limit\n"
        "  --tls-handshakes-per-peer N  --listen over TLS, h2: handshakes\n"
        "                        one address may have in progress (default\n"
        "                        32; a connection beyond is closed at once)\n"
        "  --version             print the library version and exit\n"
        "  --descriptor-set FILE message types (a FileDescriptorSet) added to "
        "Istio 1.6's,\n"
        "                        built in: --out writes bodies of known types "
        "as JSON\n"
        "  --help                this text\n"
        "\n"
        "Exit status: 0 after SIGINT, SIGTERM or the sync (--exit-after-sync),\n"
        "1 on a runtime failure, 2 on a usage error, 3 when --sync-timeout\n"
        "expired.\n",
        f);
}

/* --api: which service the sink speaks. 0, or -1 for an unknown name. */
static int parse_api(const char *s, mcp_service *out) {
  static const struct {
    const char *name;
    mcp_service service;
  } apis[] = {
      {"resource", MCP_SERVICE_RESOURCE},
      {"aggregated", MCP_SERVICE_AGGREGATED},
      {"aggregated-incremental", MCP_SERVICE_AGGREGATED_INCREMENTAL},
  };
  for (size_t i = 0; i < sizeof(apis) / sizeof(apis[0]); i++) {
    if (strcmp(s, apis[i].name) == 0) {
      *out = apis[i].service;
      return 0;
    }
  }
  return -1;
}

/* The service the dialing sink calls, for the logs. */
static const char *service_name(mcp_service s) {
  switch (s) {
  case MCP_SERVICE_AGGREGATED:
    return "AggregatedMeshConfigService/StreamAggregatedResources";
  case MCP_SERVICE_AGGREGATED_INCREMENTAL:
    return "AggregatedMeshConfigService/IncrementalAggregatedResources";
  case MCP_SERVICE_RESOURCE:
    break;
  }
  return "ResourceSource";
}

#define usage_error(...) tool_usage_error("mcp-sink", usage, __VA_ARGS__)

/* ---- output (the transport's thread) ---- */

/* Prints |obj| (consumed) as one line when --json. */
static void emit(sink_app *a, json_t *obj) {
  if (a->json && obj) {
    char *s = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (s) {
      tool_out_line(s);
      free(s);
    }
  }
  json_decref(obj);
}

static int apply_cb(const mcp_change *ch, char *msg, size_t msglen,
                    void *ud) {
  sink_app *a = ud;
  return a->mirror ? tool_mirror_apply(a->mirror, ch, msg, msglen) : 0;
}

/* ", \"key\":[names...]" */
static void names_json(ops_buf *b, const char *key,
                       const char *const *v, size_t n) {
  ops_buf_str(b, ",\"");
  ops_buf_str(b, key);
  ops_buf_str(b, "\":[");
  for (size_t i = 0; i < n; i++) {
    if (i)
      ops_buf_add(b, ",", 1);
    ops_buf_json(b, v[i]);
  }
  ops_buf_add(b, "]", 1);
}

/* The "response" line of an answered message: what it carried, as the
 * core read it (the event's lists), and what we answered. Written straight
 * into |b|, the same text json_dumps(JSON_COMPACT | JSON_PRESERVE_ORDER)
 * gave of the object: a jansson tree of 20,000 resources was half the
 * sink's instructions in the 20 MB sync (issue 25). 0, or -1 when out of
 * memory. */
static int response_json(ops_buf *b, const mcp_event *ev) {
  int ack = ev->type == MCP_EVENT_ACK;
  ops_buf_str(b, "{\"event\":\"response\",\"collection\":");
  ops_buf_json(b, ev->collection);
  ops_buf_str(b, ",\"nonce\":");
  ops_buf_json(b, ev->nonce);
  ops_buf_str(b, ev->incremental ? ",\"incremental\":true"
                                 : ",\"incremental\":false");
  ops_buf_str(b, ",\"system_version_info\":");
  ops_buf_json(b, ev->version);
  ops_buf_str(b, ",\"resources\":[");
  for (size_t i = 0; i < ev->nlisted; i++) {
    const mcp_resource *r = &ev->resources[i];
    ops_buf_str(b, i ? ",{\"name\":" : "{\"name\":");
    ops_buf_json(b, r->name);
    ops_buf_str(b, ",\"version\":");
    ops_buf_json(b, r->version ? r->version : "");
    ops_buf_str(b, ",\"type_url\":");
    ops_buf_json(b, r->type_url ? r->type_url : "");
    ops_buf_add(b, "}", 1);
  }
  ops_buf_add(b, "]", 1);
  names_json(b, "removed", ev->removed, ev->nremoved_listed);
  names_json(b, "dropped", ev->dropped, ev->ndropped);
  ops_buf_str(b, ack ? ",\"verdict\":\"ack\"" : ",\"verdict\":\"nack\"");
  if (!ack) {
    ops_buf_printf(b, ",\"error\":{\"code\":%d,\"message\":", ev->code);
    ops_buf_json(b, ev->message);
    ops_buf_add(b, "}", 1);
  }
  if (ev->type == MCP_EVENT_TRIGGER_IGNORED)
    ops_buf_str(b, ",\"trigger\":true");
  ops_buf_printf(b, ",\"total\":%zu}", ev->held);
  if (b->failed) {
    log_warn("out of memory: no JSON line for %s nonce %s", ev->collection,
             ev->nonce);
    return -1;
  }
  return 0;
}

static void announce(sink_app *a) {
  if (a->announced)
    return;
  a->announced = 1;
  a->dial_failing = 0;
  atomic_store(&a->connected, 1);
  log_info("stream %llu: connected to %s", (unsigned long long)a->stream,
           a->peer ? a->peer : "?");
  emit(a, json_pack("{s:s, s:I, s:s}", "event", "connected", "stream",
                    (json_int_t)a->stream, "peer", a->peer ? a->peer : ""));
}

/* What arrived of a requested collection, for naming what is missing. */
enum { ACKED_NOTHING = 0, ACKED_ONCE = 1, ACKED_REJECTED_ONLY = 2 };

static void on_core_event(const mcp_event *ev, void *ud) {
  sink_app *a = ud;
  tool_ops_event(a->ops, ev);
  TOOL_LOG_CONTEXT(.stream = a->stream, .peer = a->peer,
                   .collection = ev->collection);
  int trigger = ev->type == MCP_EVENT_TRIGGER_IGNORED;
  if (ev->type != MCP_EVENT_ACK && ev->type != MCP_EVENT_NACK && !trigger)
    return;
  int ack = ev->type == MCP_EVENT_ACK;
  announce(a);
  if (trigger) {
    /* Istio's dialing source wakes a sink so; expected, not a rejection. */
    log_debug("%s (nonce %s): the source's wake-up, answered as Istio's "
              "sinks do", ev->collection, ev->nonce);
  } else if (ack) {
    log_info("%s: version %s applied: %zu resources, %zu removed%s; %zu held",
             ev->collection, ev->version, ev->nresources, ev->nremoved,
             ev->incremental ? " (incremental)" : "", ev->held);
  } else {
    log_warn("%s: rejected version %s (nonce %s): code %d: %s",
             ev->collection, ev->version[0] ? ev->version : "-", ev->nonce,
             ev->code, ev->message);
  }
  if (a->json) {
    ops_buf b;
    ops_buf_init(&b);
    if (response_json(&b, ev) == 0)
      tool_out_line(ops_buf_cstr(&b));
    ops_buf_free(&b);
  }
  if (a->synced || trigger)
    return;
  /* Only to name what is missing (--sync-warn): the core says when the
   * state is synced. */
  for (size_t i = 0; i < a->ncolls; i++)
    if (strcmp(a->colls[i], ev->collection) == 0) {
      if (ack)
        atomic_store(&a->acked[i], ACKED_ONCE);
      else if (atomic_load(&a->acked[i]) == ACKED_NOTHING)
        atomic_store(&a->acked[i], ACKED_REJECTED_ONLY);
    }
  if (!ack)
    return;
  if (ev->synced) {
    a->synced = 1;
    log_info("synced: every collection received and ACKed");
    emit(a, json_pack("{s:s}", "event", "synced"));
    if (a->exit_after_sync)
      uv_async_send(&a->synced_async);
  }
}

static void report_closed(sink_app *a, const tool_stream_info *info) {
  log_info("stream %llu: %s closed: status %d%s%s",
           (unsigned long long)info->id, info->peer, info->status,
           info->details[0] ? ": " : "", info->details);
  emit(a, json_pack("{s:s, s:I, s:s, s:i, s:s}", "event", "disconnected",
                    "stream", (json_int_t)info->id, "peer", info->peer,
                    "status", info->status, "details", info->details));
}

/* A call refused before it became a stream (the transport's thread). */
static void on_refused(const tool_stream_info *info, void *ud) {
  sink_app *a = ud;
  tool_ops_refused(a->ops, info);
  tool_ops_log_refused(info);
}

/*
 * 1 when the server at HOST:PORT answers a TLS ClientHello with a TLS
 * record (a ServerHello or an alert): a cleartext dial to it fails with
 * only "Socket closed". Blocks for about a second at most (connect, send,
 * and each read are bounded); 0 on any doubt.
 */
static int speaks_tls(const char *hostport) {
  static const uint8_t hello[] = {
      0x16, 0x03, 0x01, 0x00, 0x5d, /* record: handshake, 93 bytes */
      0x01, 0x00, 0x00, 0x59,       /* ClientHello, 89 bytes */
      0x03, 0x03,                   /* TLS 1.2 */
      1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
      21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, /* random */
      0x00,                                           /* no session id */
      0x00, 0x08, 0xc0, 0x2f, 0xc0, 0x2b, 0xc0, 0x30, 0xc0, 0x2c, /* suites */
      0x01, 0x00,                   /* no compression */
      0x00, 0x28,                   /* extensions, 40 bytes */
      0x00, 0x0a, 0x00, 0x06, 0x00, 0x04, 0x00, 0x1d, 0x00, 0x17, /* groups */
      0x00, 0x0b, 0x00, 0x02, 0x01, 0x00, /* point formats */
      0x00, 0x0d, 0x00, 0x06, 0x00, 0x04, 0x04, 0x01, 0x04, 0x03, /* sigalgs */
      0x00, 0x10, 0x00, 0x05, 0x00, 0x03, 0x02, 0x68, 0x32, /* ALPN h2 */
      0xff, 0x01, 0x00, 0x01, 0x00, /* renegotiation_info */
  };
  char host[256];
  const char *colon = strrchr(hostport, ':');
  size_t hl = colon ? (size_t)(colon - hostport) : 0;
  if (!colon || hl >= sizeof(host))
    return 0;
  memcpy(host, hostport, hl);
  host[hl] = '\0';
  if (hl >= 2 && host[0] == '[') { /* [::1] */
    memmove(host, host + 1, hl - 2);
    host[hl - 2] = '\0';
  }
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
  if (getaddrinfo(host, colon + 1, &hints, &ai) != 0 || !ai)
    return 0;
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int tls = 0;
  struct timeval tv = {1, 0}; /* Linux: SO_SNDTIMEO bounds connect() too */
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }
  if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
    uint8_t in[2];
    size_t got = 0;
    if (send(fd, hello, sizeof(hello), MSG_NOSIGNAL) == (ssize_t)sizeof(hello)) {
      ssize_t n;
      while (got < 2 && (n = recv(fd, in + got, 2 - got, 0)) > 0)
        got += (size_t)n;
    }
    /* Handshake (22) or alert (21), major version 3: no HTTP/2 frame
     * header or HTTP/1 answer starts so. */
    tls = got == 2 && (in[0] == 0x16 || in[0] == 0x15) && in[1] == 0x03;
  }
  if (fd >= 0)
    close(fd);
  freeaddrinfo(ai);
  return tls;
}

static void on_stream(int opened, const tool_stream_info *info, void *ud) {
  sink_app *a = ud;
  tool_ops_stream(a->ops, opened, info);
  TOOL_LOG_CONTEXT(.stream = info->id, .peer = info->peer);
  if (opened) {
    a->stream = info->id;
    free(a->peer);
    a->peer = strdup(info->peer);
    a->announced = 0;
    if (info->dialed)
      log_debug("stream %llu: dialing %s", (unsigned long long)info->id,
                info->peer);
    else
      announce(a); /* accepted: connected already */
    return;
  }
  if (!info->dialed) {
    /* Announced when accepted; it may have been replaced by a newer one. */
    if (info->id == a->stream) {
      a->announced = 0;
      atomic_store(&a->connected, 0);
      if (atomic_load(&a->finishing)) /* --exit-after-sync: the end */
        uv_async_send(&a->ended_async);
    }
    report_closed(a, info);
    return;
  }
  if (info->id != a->stream)
    return; /* one dialed stream at a time: not expected */
  atomic_store(&a->connected, 0);
  if (atomic_load(&a->finishing)) /* --exit-after-sync: the end awaited */
    uv_async_send(&a->ended_async);
  if (a->announced) {
    a->announced = 0;
    report_closed(a, info);
    return;
  }
  if (atomic_load(&a->quitting)) {
    /* Our own cancel: no failure, and no retry follows. */
    log_info("stream %llu: dial to %s abandoned: stopping",
             (unsigned long long)info->id, info->peer);
    return;
  }
  /* A dial that never got an answer. */
  int first = a->dial_failing != (info->status ? info->status : -1);
  tool_ops_log_dial_failure(info, "the source", &a->dial_failing);
  if (first && a->cleartext_dial && !a->probed && info->status == 14 &&
      !strstr(info->details, "refused")) {
    a->probed = 1; /* once: it blocks this thread for a moment */
    if (speaks_tls(a->address))
      log_warn("the source at %s speaks TLS: pass --tls-ca FILE (the CA of "
               "its certificate) to dial it with TLS", a->address);
  }
}

/* ---- the loop (main thread) ---- */

/* Stops the endpoint (no callback runs any more once it returns) and
 * closes every handle: uv_run() then returns. */
static void stop(sink_app *a) {
  if (a->stopping)
    return;
  a->stopping = 1;
  atomic_store(&a->quitting, 1);
  tool_ops_close(a->ops);
  tool_access_close(a->access);
  tool_tls_watch_close(a->tls_watch);
  a->tls_watch = NULL;
  if (a->ep)
    a->tp->sink_del(a->ep);
  a->ep = NULL;
  uv_close((uv_handle_t *)&a->sigint, NULL);
  uv_close((uv_handle_t *)&a->sigterm, NULL);
  uv_close((uv_handle_t *)&a->synced_async, NULL);
  uv_close((uv_handle_t *)&a->ended_async, NULL);
  uv_close((uv_handle_t *)&a->flush, NULL);
  uv_close((uv_handle_t *)&a->sync_warn, NULL);
  uv_close((uv_handle_t *)&a->sync_timeout, NULL);
}

/* The requested collections whose ACKED_* state is in |states| (a mask of
 * 1 << state), "a, b" (at most |len| bytes); the number of them. Main
 * thread. */
static size_t collections_in(sink_app *a, unsigned states, char *buf,
                             size_t len, json_t *arr) {
  size_t n = 0, at = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < a->ncolls; i++) {
    if (!(states & (1u << atomic_load(&a->acked[i]))))
      continue;
    if (at < len) {
      int w = snprintf(buf + at, len - at, "%s%s", n ? ", " : "", a->colls[i]);
      at += w > 0 ? (size_t)w : 0;
    }
    if (arr)
      json_array_append_new(arr, json_string(a->colls[i]));
    n++;
  }
  return n;
}

/* Not ACKed yet: nothing came, or only what was rejected. */
static size_t missing(sink_app *a, char *buf, size_t len, json_t *arr) {
  return collections_in(a, 1u << ACKED_NOTHING | 1u << ACKED_REJECTED_ONLY,
                        buf, len, arr);
}

/* --sync-warn: names what has not arrived, again at doubling intervals
 * (at most every 10 minutes) while it has not. */
static void on_sync_warn(uv_timer_t *t) {
  sink_app *a = t->data;
  char names[1024];
  if (missing(a, names, sizeof(names), NULL) == 0) {
    log_debug("--sync-warn: every collection received");
    uv_timer_stop(t);
    return;
  }
  uint64_t waited = (uv_now(&a->loop) - a->started) / 1000;
  /* A rejected collection did arrive: "nothing received" would send the
   * user looking at the source's configuration instead of the NACK. */
  if (collections_in(a, 1u << ACKED_REJECTED_ONLY, names, sizeof(names),
                     NULL) > 0)
    log_warn("not synced after %llu s: %s received but rejected (the NACK "
             "logged above says why)",
             (unsigned long long)waited, names);
  size_t none = collections_in(a, 1u << ACKED_NOTHING, names, sizeof(names),
                               NULL);
  if (none > 0 && atomic_load(&a->connected))
    log_warn("nothing received after %llu s for %s: does the source serve "
             "%s?", (unsigned long long)waited, names,
             none > 1 ? "these collections" : "this collection");
  else if (none > 0)
    log_warn("not synced after %llu s (%s): no source connected",
             (unsigned long long)waited, names);
  uint64_t next = uv_timer_get_repeat(t) * 2;
  if (next > 600000)
    next = 600000;
  uv_timer_set_repeat(t, next);
}

/* --sync-timeout: exit 3 when not synced in time. */
static void on_sync_timeout(uv_timer_t *t) {
  sink_app *a = t->data;
  char names[1024];
  json_t *arr = json_array();
  if (missing(a, names, sizeof(names), arr) == 0) {
    log_debug("--sync-timeout: synced in time");
    json_decref(arr);
    return;
  }
  log_error("--sync-timeout: not synced after %llu s; nothing ACKed yet for "
            "%s", (unsigned long long)(a->sync_timeout_ms / 1000), names);
  emit(a, json_pack("{s:s, s:o*}", "event", "sync_timeout", "missing", arr));
  a->timed_out = 1;
  stop(a);
}

static void on_signal(uv_signal_t *h, int signum) {
  log_info("%s: stopping", signum == SIGINT ? "SIGINT" : "SIGTERM");
  stop(h->data);
}

/* Exit after sync, in two steps: the answers go on the wire (every
 * initial request and every ACK or NACK of the stream sent, nothing left
 * in the session), then the stream ends. A cancel at once could reach the
 * source before our last ACK. At the sync event the stream is finished
 * (sink_finish(): what is ready is sent first), and its end (on_stream)
 * is the exit. Dialing: the stream is half-closed and the source, which
 * reads every answer first, ends it (OK). Listening: the transport ends
 * it with OK itself. The wait is bounded: a source may not end the
 * stream. */
static void exit_synced(sink_app *a, int late) {
  log_info("exiting after sync%s",
           late ? " (the stream did not end in time)" : "");
  stop(a);
}

/* The finished stream did not end in time. */
static void on_finish_late(uv_timer_t *t) { exit_synced(t->data, 1); }

/* The finished stream ended. */
static void on_ended(uv_async_t *h) {
  sink_app *a = h->data;
  if (!a->stopping && atomic_load(&a->finishing))
    exit_synced(a, 0);
}

static void on_synced(uv_async_t *h) {
  sink_app *a = h->data;
  if (a->stopping || atomic_load(&a->finishing))
    return;
  tool_sink_stream_stats st;
  atomic_store(&a->finishing, 1); /* before: the end may come at once */
  if (a->tp->sink_stats(a->ep, &st) != 0 || !st.open ||
      !a->tp->sink_finish || a->tp->sink_finish(a->ep) != 0) {
    exit_synced(a, 0); /* no open stream, or it cannot be finished */
    return;
  }
  log_debug(a->dialing ? "half-closed the stream: waiting for the source to "
                         "end it"
                       : "finished the stream: it ends once the answers "
                         "are sent");
  uv_timer_start(&a->flush, on_finish_late, FLUSH_WAIT_MS + FINISH_WAIT_MS,
                 0);
}

int main(int argc, char **argv) {
  tool_log_init("mcp-sink", TOOL_LOG_INFO);
  /* The engine's other protocols: Conduit's Destination, swarmkit's
   * Dispatcher (sink_proto.c). */
  if (tool_sink_proto_wanted(argc, argv))
    return tool_sink_proto_main(argc, argv);
  const char *listen = NULL, *connect = NULL, *out = NULL, *v = NULL;
  const char *transport = NULL, *level = "info"; /* transport: below */
  const char *node_id = DEFAULT_NODE_ID;
  int incremental = 0, json = 0, exit_after_sync = 0, rv, status = 2;
  unsigned long sync_warn_s = DEFAULT_SYNC_WARN_S, sync_timeout_s = 0;
  const char *api = "resource";
  mcp_service service = MCP_SERVICE_RESOURCE;
  tool_strv colls = {0};
  tool_ops_args ops_args = {0}; /* --debug-listen, --log-format */
  tool_sec_args sec = {0};       /* --tls-*, --allow, --deny, --access-list */
  tool_schema_args schema_args = {0}; /* --descriptor-set */
  char why[600];
  mcp_kv *annots = NULL;
  size_t nannots = 0;
  sink_app app;
  memset(&app, 0, sizeof(app));

  for (int i = 1; i < argc; i++) {
    if (tool_arg_flag(argv, i, "--version")) {
      printf("mcp-sink %s\n", mcp_version());
      status = 0;
      goto out;
    }
    if (tool_arg_flag(argv, i, "--help") || tool_arg_flag(argv, i, "-h")) {
      usage(stdout);
      status = 0;
      goto out;
    }
#define VALUE(name) ((rv = tool_arg_value(argc, argv, &i, name, &v)) != 0)
    if (tool_arg_flag(argv, i, "--incremental")) {
      incremental = 1;
    } else if (tool_arg_flag(argv, i, "--json")) {
      json = 1;
    } else if (tool_arg_flag(argv, i, "--exit-after-sync")) {
      exit_after_sync = 1;
    } else if (VALUE("--sync-warn")) {
      if (rv < 0)
        goto bad;
      if (tool_parse_ulong(v, MAX_SYNC_S, &sync_warn_s) != 0) {
        usage_error("--sync-warn: not a number of seconds: %s", v);
        goto out;
      }
    } else if (VALUE("--sync-timeout")) {
      if (rv < 0)
        goto bad;
      if (tool_parse_ulong(v, MAX_SYNC_S, &sync_timeout_s) != 0 ||
          sync_timeout_s == 0) {
        usage_error("--sync-timeout: not a number of seconds (1 or more): %s",
                    v);
        goto out;
      }
    } else if (VALUE("--collection")) {
      if (rv < 0)
        goto bad;
      if (!v[0]) {
        usage_error("--collection needs a name");
        goto out;
      }
      if (tool_strv_add(&colls, v, 1) != 0)
        goto nomem;
    } else if (VALUE("--connect")) {
      if (rv < 0)
        goto bad;
      connect = v;
    } else if (VALUE("--listen")) {
      if (rv < 0)
        goto bad;
      listen = v;
    } else if (VALUE("--transport")) {
      if (rv < 0)
        goto bad;
      transport = v;
    } else if (VALUE("--api")) {
      if (rv < 0)
        goto bad;
      api = v;
    } else if (VALUE("--node-id")) {
      if (rv < 0)
        goto bad;
      node_id = v;
    } else if (VALUE("--annotation")) {
      if (rv < 0)
        goto bad;
      const char *eq = strchr(v, '=');
      if (!eq || eq == v) {
        usage_error("--annotation: expected KEY=VALUE, not %s", v);
        goto out;
      }
      char *key = strndup(v, (size_t)(eq - v));
      if (!key)
        goto nomem;
      size_t k = 0;
      while (k < nannots && strcmp(annots[k].key, key) != 0)
        k++;
      if (k < nannots) { /* given again: the last one wins */
        free(key);
        annots[k].value = eq + 1;
        continue;
      }
      mcp_kv *na = realloc(annots, (nannots + 1) * sizeof(*na));
      if (!na) {
        free(key);
        goto nomem;
      }
      annots = na;
      annots[nannots].key = key;
      annots[nannots++].value = eq + 1;
    } else if (VALUE("--out")) {
      if (rv < 0)
        goto bad;
      if (!v[0]) {
        usage_error("--out needs a directory");
        goto out;
      }
      out = v;
    } else if (VALUE("--log-level")) {
      if (rv < 0)
        goto bad;
      level = v;
    } else if ((rv = tool_ops_parse_arg(argc, argv, &i, &ops_args)) != 0) {
      if (rv < 0)
        goto bad;
    } else if ((rv = tool_sec_parse_arg(argc, argv, &i, &sec)) != 0) {
      if (rv == -2)
        goto nomem;
      if (rv < 0)
        goto bad;
    } else if ((rv = tool_schema_parse_arg(argc, argv, &i, &schema_args, 0)) !=
               0) {
      if (rv == -2)
        goto nomem;
      if (rv < 0)
        goto bad;
    } else {
      tool_unknown_arg("mcp-sink", usage, "unknown argument", argv[i]);
      goto out;
    }
#undef VALUE
  }

  tool_log_level lvl;
  if (tool_log_parse_level(level, &lvl) != 0) {
    usage_error("--log-level: expected error, warn, info or debug, not %s",
                level);
    goto out;
  }
  tool_log_init("mcp-sink", lvl);
  tool_log_set_format(ops_args.log_format);
  if (colls.n == 0) {
    usage_error("at least one --collection is needed");
    goto out;
  }
  if (listen && connect) {
    usage_error("--listen and --connect exclude each other");
    goto out;
  }
  if (parse_api(api, &service) != 0) {
    usage_error("--api: expected resource, aggregated or "
                "aggregated-incremental, not %s", api);
    goto out;
  }
  if (service != MCP_SERVICE_RESOURCE && listen) {
    usage_error("--api %s: the sink dials the AggregatedMeshConfigService "
                "(--connect), it cannot --listen", api);
    goto out;
  }
  if (service == MCP_SERVICE_AGGREGATED && incremental) {
    usage_error("--api aggregated: StreamAggregatedResources is full state "
                "only (--api aggregated-incremental is incremental)");
    goto out;
  }
  const char *address = connect ? connect : listen ? listen : DEFAULT_ADDRESS;
  const char *addr_why;
  if ((listen ? tool_check_hostport(address, 0, &addr_why)
              : tool_check_hostports(address, 1, &addr_why)) != 0) {
    usage_error("%s %s: %s", listen ? "--listen" : "--connect", address,
                addr_why);
    goto out;
  }
  for (size_t i = 0; out && i < colls.n; i++) {
    if (!tool_path_safe(colls.v[i])) {
      usage_error("--collection %s cannot be a directory under --out (empty "
                  "segment, leading '/' or \"..\")", colls.v[i]);
      goto out;
    }
  }
  if (!transport) {
    transport = tool_sec_default_transport(&sec, listen != NULL);
    if (tool_transport_find(transport, &app.tp) != 0)
      transport = tool_transport_default();
  }
  rv = tool_transport_find(transport, &app.tp);
  if (rv == -2) {
    fprintf(stderr, "mcp-sink: %s transport not built into this program "
                    "(use --transport %s)\n", transport, tool_transport_default());
    goto out;
  }
  if (rv != 0) {
    char names[64];
    usage_error("unknown transport %s (expected %s)", transport,
                tool_transport_names(names, sizeof names));
    goto out;
  }
  if (tool_sec_check(&sec, tool_transport_sec(app.tp), app.tp->name,
                     listen != NULL, address, why, sizeof(why)) != 0) {
    usage_error("%s", why);
    goto out;
  }
  if (tool_sec_acl(&sec)) {
    rv = tool_access_new(&app.access, app.tp, sec.allow.v, sec.allow.n,
                         sec.deny.v, sec.deny.n, sec.access_list, why,
                         sizeof(why));
    if (rv == 2) {
      usage_error("%s", why);
      goto out;
    }
    if (rv != 0) {
      log_error("%s", why);
      status = 1;
      goto out;
    }
  }

  status = 1;
  tool_proc_init(listen != NULL);
  if (tool_sec_tls(&sec)) {
    const tool_tls_options t = {sec.tls_cert, sec.tls_key, sec.tls_ca,
                                sec.tls_server_name};
    if ((rv = app.tp->tls_check(&t, why, sizeof(why))) < 0) {
      log_error("TLS: %s", why[0] ? why : mcp_strerror(rv));
      goto out;
    }
  }
  app.json = json;
  app.exit_after_sync = exit_after_sync;
  app.address = address;
  app.cleartext_dial = !listen && !tool_sec_tls(&sec);
  app.dialing = !listen;
  app.colls = colls.v;
  app.ncolls = colls.n;
  if (!(app.acked = calloc(colls.n, sizeof(*app.acked))))
    goto nomem;
  if (tool_schema_load(&schema_args, &app.schema, why, sizeof(why)) != 0) {
    log_error("%s", why);
    goto out;
  }
  if (out) {
    char err[512];
    if (tool_mirror_new(&app.mirror, out, colls.v, colls.n, err,
                        sizeof(err)) != 0) {
      log_error("--out: %s", err);
      goto out;
    }
    tool_mirror_set_schema(app.mirror, app.schema);
  }
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.node_id = node_id;
  so.node_annotations = annots;
  so.nnode_annotations = nannots;
  so.collections = colls.v;
  so.ncollections = colls.n;
  so.incremental = incremental;
  so.service = service;
  so.apply = apply_cb;
  so.on_event = on_core_event;
  so.user_data = &app;
  if ((rv = mcp_sink_state_new(&app.state, &so)) < 0) {
    if (rv == MCP_ERR_INVALID_ARGUMENT)
      log_error("cannot create the sink state: %s (a source refuses a "
                "SinkNode over its default limits: --node-id at most %d "
                "bytes, at most %d --annotation of %d-byte keys and "
                "%d-byte values, %u bytes in all; docs/security.md)",
                mcp_strerror(rv), MCP_DEFAULT_MAX_NODE_ID_LEN,
                MCP_DEFAULT_MAX_NODE_ANNOTATIONS, MCP_DEFAULT_MAX_NODE_KEY_LEN,
                MCP_DEFAULT_MAX_NODE_VALUE_LEN, MCP_DEFAULT_MAX_NODE_BYTES);
    else
      log_error("cannot create the sink state: %s", mcp_strerror(rv));
    goto out;
  }

  tool_ops_options oo = {.role = TOOL_OPS_SINK,
                         .component = "mcp-sink",
                         .node_id = node_id,
                         .node_annotations = annots,
                         .nnode_annotations = nannots};
  if (tool_ops_new(&app.ops, &oo) != 0)
    goto nomem;
  uv_loop_init(&app.loop);
  uv_signal_init(&app.loop, &app.sigint);
  uv_signal_init(&app.loop, &app.sigterm);
  uv_async_init(&app.loop, &app.synced_async, on_synced);
  uv_async_init(&app.loop, &app.ended_async, on_ended);
  uv_timer_init(&app.loop, &app.flush);
  uv_timer_init(&app.loop, &app.sync_warn);
  uv_timer_init(&app.loop, &app.sync_timeout);
  app.sigint.data = app.sigterm.data = app.synced_async.data =
      app.ended_async.data =
      app.flush.data = app.sync_warn.data = app.sync_timeout.data = &app;
  app.started = uv_now(&app.loop);
  app.sync_timeout_ms = (uint64_t)sync_timeout_s * 1000;
  if (sync_warn_s)
    uv_timer_start(&app.sync_warn, on_sync_warn, (uint64_t)sync_warn_s * 1000,
                   (uint64_t)sync_warn_s * 1000);
  if (sync_timeout_s)
    uv_timer_start(&app.sync_timeout, on_sync_timeout, app.sync_timeout_ms, 0);
  uv_signal_start(&app.sigint, on_signal, SIGINT);
  uv_signal_start(&app.sigterm, on_signal, SIGTERM);

  tool_endpoint_options eo = tool_endpoint_base(&sec, app.access, app.ops);
  eo.mode = listen ? TOOL_LISTEN : TOOL_DIAL;
  eo.address = address;
  eo.on_stream = on_stream;
  eo.on_refused = on_refused;
  eo.user_data = &app;
  errno = 0; /* the transport sets it when it cannot bind */
  if ((rv = app.tp->sink_new(&app.ep, &app.loop, &eo, app.state)) < 0) {
    log_error("cannot %s %s: %s", listen ? "listen on" : "dial", address,
              tool_endpoint_strerror(rv, errno));
    app.ep = NULL;
    stop(&app);
    uv_run(&app.loop, UV_RUN_DEFAULT);
    uv_loop_close(&app.loop);
    goto out;
  }
  tool_ops_attach(app.ops, app.tp, app.ep);
  /* SIGHUP is ours before the address is announced. */
  tool_access_watch(app.access, &app.loop, app.ep, 1);
  if (tool_sec_tls(&sec)) {
    const tool_tls_options t = {sec.tls_cert, sec.tls_key, sec.tls_ca,
                                sec.tls_server_name};
    if (tool_tls_watch_start(&app.tls_watch, app.tp, &t, &app.loop) != 0)
      log_warn("out of memory: a broken change of the TLS files will not "
               "be reported");
  }
  if (listen) {
    char buf[300];
    tool_addr_bound(buf, sizeof(buf), address, app.tp->sink_port(app.ep));
    log_info("serving ResourceSink on %s (%s)", buf, app.tp->name);
    if (json) {
      json_t *o = json_pack("{s:s, s:s}", "event", "listening", "address",
                            buf);
      char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
      if (s)
        tool_out_line(s);
      free(s);
      json_decref(o);
    }
  } else {
    log_info("dialing the %s at %s (%s)", service_name(service), address,
             app.tp->name);
  }
  if (app.tp->tls_check) {
    tool_sec_describe(&sec, listen != NULL, why, sizeof(why));
    log_info("security: %s", why);
    if (app.access) {
      size_t n = app.tp->acl_count(tool_access_acl(app.access));
      log_info("access list: %zu rule%s%s%s", n, n == 1 ? "" : "s",
               sec.access_list ? ", watching " : "",
               sec.access_list ? sec.access_list : "");
    }
    if (listen && !tool_sec_tls(&sec) && !sec.allow_cleartext &&
        !tool_addr_is_loopback(address))
      log_warn("serving without TLS on %s, which is not loopback: peers are "
               "neither encrypted nor authenticated (give --tls-cert, "
               "--tls-key and --tls-ca; --allow-cleartext silences this)",
               address);
  }
  /* Runs until a signal or the sync: stop() deletes the endpoint and
   * closes the handles, and the loop ends once the transport's are closed
   * too. */
  int ops_failed = 0;
  if (ops_args.debug_listen) {
    char err[300];
    if (tool_ops_listen(app.ops, &app.loop, ops_args.debug_listen, NULL, err,
                        sizeof(err)) != 0) {
      log_error("--debug-listen: %s", err);
      ops_failed = 1;
      stop(&app);
    } else {
      char buf[300];
      tool_addr_bound(buf, sizeof(buf), ops_args.debug_listen,
                      tool_ops_port(app.ops));
      log_info("debug endpoints on http://%s/", buf);
    }
  }
  uv_run(&app.loop, UV_RUN_DEFAULT);
  uv_loop_close(&app.loop);
  status = ops_failed ? 1 : app.timed_out ? 3 : 0;
  log_info("stopped");
  goto out;

nomem:
  fprintf(stderr, "mcp-sink: out of memory\n");
  status = 1;
  goto out;
bad:
  status = tool_see_help("mcp-sink");
out:
  mcp_sink_state_del(app.state);
  tool_ops_del(app.ops);
  tool_access_del(app.access);
  tool_sec_args_free(&sec);
  tool_mirror_del(app.mirror);
  mcp_schema_free(app.schema);
  tool_schema_args_free(&schema_args);
  free(app.acked);
  free(app.peer);
  for (size_t i = 0; i < nannots; i++)
    free((char *)annots[i].key);
  free(annots);
  tool_strv_free(&colls);
  return status;
}
