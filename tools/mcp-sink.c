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
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uv.h>

#include "args.h"
#include "log.h"
#include "proc.h"
#include "mirror.h"
#include "ops/ops.h"
#include "rand.h"
#include "schema_args.h"
#include "transport.h"

#define DEFAULT_ADDRESS "127.0.0.1:9901"
#define DEFAULT_NODE_ID "mcp-sink"
/* --exit-after-sync waits at most this long for the last ACK to be sent. */
#define FLUSH_WAIT_MS 1000
#define FLUSH_POLL_MS 5

/* What the apply callback saw of the message being answered. */
typedef struct record {
  char *collection, *nonce;
  json_t *resources, *removed;
} record;

typedef struct sink_app {
  uv_loop_t loop;
  const tool_transport *tp;
  void *ep;
  mcp_sink_state *state;
  tool_ops *ops; /* metrics and debug endpoints (tools/ops) */
  tool_access *access; /* --allow, --deny, --access-list; NULL: none */
  tool_mirror *mirror;
  mcp_schema *schema; /* --out's typed bodies: Istio's, --descriptor-set */
  int json, exit_after_sync;
  const char *const *colls;
  size_t ncolls;
  uv_signal_t sigint, sigterm;
  uv_async_t synced_async;
  uv_timer_t flush;
  int stopping;
  uint64_t flush_deadline; /* uv_now() */
  atomic_uint_fast64_t answers; /* ACKs and NACKs of the current stream */

  /* Transport thread only. */
  record rec;
  unsigned char *acked; /* per requested collection: ACKed once */
  size_t nacked;
  int synced;
  uint64_t stream; /* id of the current stream */
  char *peer;      /* its peer */
  int announced;   /* "connected" was reported for it */
  int dial_failing; /* the status the failing dials end with, 0: none */
} sink_app;

static void usage(FILE *f) {
  fputs("usage: mcp-sink --collection NAME... [--connect HOST:PORT | --listen "
        "HOST:PORT]\n"
        "                [--transport grpc|h2c] [--incremental] [--node-id ID]\n"
        "                [--annotation KEY=VALUE]... [--out DIR] [--json]\n"
        "                [--exit-after-sync] [--log-level LEVEL]\n"
        "                [--api resource|aggregated|aggregated-incremental]\n"
        "                [--log-format text|json] [--debug-listen HOST:PORT]\n"
        "                [--tls-cert FILE --tls-key FILE] [--tls-ca FILE]\n"
        "                [--tls-server-name NAME] [--allow ID]... [--deny ID]...\n"
        "                [--access-list FILE] [--allow-cleartext]\n"
        "                [--descriptor-set FILE]...\n"
        "\n"
        "Subscribes to MCP collections and reports what it receives.\n"
        "\n"
        "  --collection NAME     a collection to subscribe to (repeatable; at "
        "least one)\n"
        "  --connect HOST:PORT   dial a ResourceSource, reconnecting forever\n"
        "                        (default " DEFAULT_ADDRESS ")\n"
        "  --listen HOST:PORT    serve ResourceSink: sources dial us\n"
        "  --transport NAME      grpc (default) or h2c: HTTP/2 without TLS\n"
        "  --incremental         ask for incremental pushes\n"
        "  --api API             resource (default): ResourceSource/ResourceSink;\n"
        "                        aggregated, aggregated-incremental: dial the\n"
        "                        AggregatedMeshConfigService (--connect only);\n"
        "                        each --collection is then a type URL\n"
        "  --node-id ID          SinkNode.id (default " DEFAULT_NODE_ID ")\n"
        "  --annotation KEY=VALUE  a SinkNode annotation (repeatable)\n"
        "  --out DIR             mirror what is held into "
        "DIR/<collection>/<name>.json\n"
        "  --json                print each response as a JSON line on stdout\n"
        "  --exit-after-sync     exit 0 once every collection was received "
        "and ACKed\n"
        "  --log-level LEVEL     error, warn, info (default) or debug\n"
        "  --log-format FORMAT   text (default) or json: one object per line\n"
        "  --debug-listen HOST:PORT  serve /metrics, /debug/syncz,\n"
        "                        /debug/journal, /healthz and /readyz over HTTP\n"
        "  --tls-cert FILE       our certificate chain (PEM; grpc only)\n"
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
        "  --allow-cleartext     let h2c listen on an address that is not "
        "loopback\n"
        "  --descriptor-set FILE message types (a FileDescriptorSet) added to "
        "Istio 1.6's,\n"
        "                        built in: --out writes bodies of known types "
        "as JSON\n"
        "  --help                this text\n"
        "\n"
        "Exit status: 0 after SIGINT, SIGTERM or the sync (--exit-after-sync),\n"
        "1 on a runtime failure, 2 on a usage error.\n",
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

static int usage_error(const char *fmt, ...) TOOL_PRINTF(1, 2);
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("mcp-sink: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  usage(stderr);
  return 2;
}

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

static void record_clear(record *r) {
  free(r->collection);
  free(r->nonce);
  json_decref(r->resources);
  json_decref(r->removed);
  memset(r, 0, sizeof(*r));
}

static void record_change(sink_app *a, const mcp_change *ch) {
  record *r = &a->rec;
  record_clear(r);
  r->collection = strdup(ch->collection);
  r->nonce = strdup(ch->nonce);
  r->resources = json_array();
  r->removed = json_array();
  int ok = r->collection && r->nonce && r->resources && r->removed;
  for (size_t i = 0; ok && i < ch->nresources; i++) {
    const mcp_resource *res = &ch->resources[i];
    ok = json_array_append_new(
             r->resources,
             json_pack("{s:s, s:s, s:s}", "name", res->name, "version",
                       res->version ? res->version : "", "type_url",
                       res->type_url ? res->type_url : "")) == 0;
  }
  for (size_t i = 0; ok && i < ch->nremoved; i++)
    ok = json_array_append_new(r->removed, json_string(ch->removed[i])) == 0;
  if (!ok) {
    log_warn("out of memory: the JSON line of %s nonce %s lists nothing",
             ch->collection, ch->nonce);
    record_clear(r);
  }
}

static int apply_cb(const mcp_change *ch, char *msg, size_t msglen,
                    void *ud) {
  sink_app *a = ud;
  if (a->json)
    record_change(a, ch);
  return a->mirror ? tool_mirror_apply(a->mirror, ch, msg, msglen) : 0;
}

static void announce(sink_app *a) {
  if (a->announced)
    return;
  a->announced = 1;
  a->dial_failing = 0;
  log_info("stream %llu: connected to %s", (unsigned long long)a->stream,
           a->peer ? a->peer : "?");
  emit(a, json_pack("{s:s, s:I, s:s}", "event", "connected", "stream",
                    (json_int_t)a->stream, "peer", a->peer ? a->peer : ""));
}

static void on_core_event(const mcp_event *ev, void *ud) {
  sink_app *a = ud;
  tool_ops_event(a->ops, ev);
  TOOL_LOG_CONTEXT(.stream = a->stream, .peer = a->peer,
                   .collection = ev->collection);
  if (ev->type != MCP_EVENT_ACK && ev->type != MCP_EVENT_NACK)
    return;
  int ack = ev->type == MCP_EVENT_ACK;
  atomic_fetch_add(&a->answers, 1);
  announce(a);
  if (ack) {
    log_info("%s: version %s applied: %zu resources, %zu removed%s; %zu held",
             ev->collection, ev->version, ev->nresources, ev->nremoved,
             ev->incremental ? " (incremental)" : "", ev->held);
  } else {
    log_warn("%s: rejected version %s (nonce %s): code %d: %s",
             ev->collection, ev->version[0] ? ev->version : "-", ev->nonce,
             ev->code, ev->message);
  }
  if (a->json) {
    record *r = &a->rec;
    int mine = r->collection && strcmp(r->collection, ev->collection) == 0 &&
               strcmp(r->nonce, ev->nonce) == 0;
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:b, s:s, s:o, s:o, s:s}", "event", "response",
        "collection", ev->collection, "nonce", ev->nonce, "incremental",
        ev->incremental, "system_version_info", ev->version, "resources",
        mine ? json_incref(r->resources) : json_array(), "removed",
        mine ? json_incref(r->removed) : json_array(), "verdict",
        ack ? "ack" : "nack");
    if (o && !ack)
      json_object_set_new(o, "error",
                          json_pack("{s:i, s:s}", "code", ev->code,
                                    "message", ev->message));
    if (o)
      json_object_set_new(o, "total", json_integer((json_int_t)ev->held));
    emit(a, o);
  }
  record_clear(&a->rec);
  if (!ack || a->synced)
    return;
  for (size_t i = 0; i < a->ncolls; i++) {
    if (!a->acked[i] && strcmp(a->colls[i], ev->collection) == 0) {
      a->acked[i] = 1;
      a->nacked++;
    }
  }
  if (a->nacked == a->ncolls) {
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
  TOOL_LOG_CONTEXT(.stream = info->id, .peer = info->peer);
  char name[24];
  tool_log(info->status == 7 || info->status == 16 ? TOOL_LOG_WARN
                                                   : TOOL_LOG_INFO,
           "refused %s: status %d (%s): %s; identity %s", info->peer,
           info->status,
           tool_ops_code_name(info->status, name, sizeof(name)),
           info->details,
           info->nidentities ? info->identities[0] : "none");
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
    atomic_store(&a->answers, 0);
    if (info->dialed)
      log_debug("stream %llu: dialing %s", (unsigned long long)info->id,
                info->peer);
    else
      announce(a); /* accepted: connected already */
    return;
  }
  if (!info->dialed) {
    /* Announced when accepted; it may have been replaced by a newer one. */
    if (info->id == a->stream)
      a->announced = 0;
    report_closed(a, info);
    return;
  }
  if (info->id != a->stream)
    return; /* one dialed stream at a time: not expected */
  if (a->announced) {
    a->announced = 0;
    report_closed(a, info);
    return;
  }
  /* A dial that never got an answer. */
  tool_ops_log_dial_failure(info, "the source", &a->dial_failing);
}

/* ---- the loop (main thread) ---- */

/* Stops the endpoint (no callback runs any more once it returns) and
 * closes every handle: uv_run() then returns. */
static void stop(sink_app *a) {
  if (a->stopping)
    return;
  a->stopping = 1;
  tool_ops_close(a->ops);
  tool_access_close(a->access);
  if (a->ep)
    a->tp->sink_del(a->ep);
  a->ep = NULL;
  uv_close((uv_handle_t *)&a->sigint, NULL);
  uv_close((uv_handle_t *)&a->sigterm, NULL);
  uv_close((uv_handle_t *)&a->synced_async, NULL);
  uv_close((uv_handle_t *)&a->flush, NULL);
}

static void on_signal(uv_signal_t *h, int signum) {
  log_info("%s: stopping", signum == SIGINT ? "SIGINT" : "SIGTERM");
  stop(h->data);
}

/* Exit after sync once the answers are on the wire: every initial request
 * and every ACK or NACK of the stream sent, nothing left in the session. */
static void on_flush(uv_timer_t *t) {
  sink_app *a = t->data;
  tool_sink_stream_stats st;
  int done = uv_now(&a->loop) >= a->flush_deadline;
  if (!done && a->tp->sink_stats(a->ep, &st) == 0) {
    done = !st.open || (!st.want_write &&
                        st.sent >= a->ncolls + atomic_load(&a->answers));
  }
  if (done) {
    log_info("exiting after sync");
    stop(a);
  }
}

static void on_synced(uv_async_t *h) {
  sink_app *a = h->data;
  if (a->stopping || uv_is_active((uv_handle_t *)&a->flush))
    return;
  a->flush_deadline = uv_now(&a->loop) + FLUSH_WAIT_MS;
  uv_timer_start(&a->flush, on_flush, 0, FLUSH_POLL_MS);
}

int main(int argc, char **argv) {
  tool_log_init("mcp-sink", TOOL_LOG_INFO);
  const char *listen = NULL, *connect = NULL, *out = NULL, *v = NULL;
  const char *transport = tool_transport_default(), *level = "info";
  const char *node_id = DEFAULT_NODE_ID;
  int incremental = 0, json = 0, exit_after_sync = 0, rv, status = 2;
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
      usage_error("unknown argument: %s", argv[i]);
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
  if (tool_check_hostport(address, listen ? 0 : 1, &addr_why) != 0) {
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
  rv = tool_transport_find(transport, &app.tp);
  if (rv == -2) {
    fprintf(stderr, "mcp-sink: %s transport not built into this program "
                    "(use --transport %s)\n", transport, tool_transport_default());
    goto out;
  }
  if (rv != 0) {
    usage_error("unknown transport %s (expected grpc or h2c)", transport);
    goto out;
  }
  if (tool_sec_check(&sec, app.tp->tls_check != NULL, app.tp->name,
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
  tool_proc_init();
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
  app.colls = colls.v;
  app.ncolls = colls.n;
  if (!(app.acked = calloc(colls.n, 1)))
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
    /* Never full state: the first push of a type is everything. */
    if (service == MCP_SERVICE_AGGREGATED_INCREMENTAL)
      tool_mirror_first_is_full(app.mirror);
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
  uv_timer_init(&app.loop, &app.flush);
  app.sigint.data = app.sigterm.data = app.synced_async.data =
      app.flush.data = &app;
  uv_signal_start(&app.sigint, on_signal, SIGINT);
  uv_signal_start(&app.sigterm, on_signal, SIGTERM);

  tool_endpoint_options eo = {
      .mode = listen ? TOOL_LISTEN : TOOL_DIAL,
      .address = address,
      .rand = tool_rand,
      .on_stream = on_stream,
      .user_data = &app,
      .http = tool_ops_http, /* h2c: the debug endpoints on its port */
      .http_user_data = app.ops,
      .tls = {sec.tls_cert, sec.tls_key, sec.tls_ca, sec.tls_server_name},
      .acl = tool_access_acl(app.access),
      .on_refused = on_refused,
  };
  if ((rv = app.tp->sink_new(&app.ep, &app.loop, &eo, app.state)) < 0) {
    log_error("cannot %s %s: %s", listen ? "listen on" : "dial", address,
              mcp_strerror(rv));
    app.ep = NULL;
    stop(&app);
    uv_run(&app.loop, UV_RUN_DEFAULT);
    uv_loop_close(&app.loop);
    goto out;
  }
  tool_ops_attach(app.ops, app.tp, app.ep);
  /* SIGHUP is ours before the address is announced. */
  tool_access_watch(app.access, &app.loop, app.ep, 1);
  if (listen) {
    const char *colon = strrchr(address, ':');
    char buf[300];
    snprintf(buf, sizeof(buf), "%.*s:%d", (int)(colon - address), address,
             app.tp->sink_port(app.ep));
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
      const char *colon = strrchr(ops_args.debug_listen, ':');
      log_info("debug endpoints on http://%.*s:%d/",
               (int)(colon - ops_args.debug_listen), ops_args.debug_listen,
               tool_ops_port(app.ops));
    }
  }
  uv_run(&app.loop, UV_RUN_DEFAULT);
  uv_loop_close(&app.loop);
  status = ops_failed ? 1 : 0;
  log_info("stopped");
  goto out;

nomem:
  fprintf(stderr, "mcp-sink: out of memory\n");
  status = 1;
  goto out;
bad:
  usage(stderr);
  status = 2;
out:
  mcp_sink_state_del(app.state);
  tool_ops_del(app.ops);
  tool_access_del(app.access);
  tool_sec_args_free(&sec);
  tool_mirror_del(app.mirror);
  mcp_schema_free(app.schema);
  tool_schema_args_free(&schema_args);
  record_clear(&app.rec);
  free(app.acked);
  free(app.peer);
  for (size_t i = 0; i < nannots; i++)
    free((char *)annots[i].key);
  free(annots);
  tool_strv_free(&colls);
  return status;
}
