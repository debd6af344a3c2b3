/* Metrics from events and streams, and the debug endpoints. */
#include "ops/ops.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <mcp/xds.h>

/* Istio's buckets for istio_mcp_message_sizes_bytes: powers of 4. */
static const double size_buckets[] = {
    1,      4,       16,       64,       256,       1024,
    4096,   16384,   65536,    262144,   1048576,   4194304,
    16777216, 67108864, 268435456, 1073741824};
static const double latency_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                         0.05,  0.1,    0.25,  0.5,  1,
                                         2.5,   5,      10,    30,   60};

struct tool_ops {
  tool_ops_options o;
  char *node_id;
  mcp_kv *annots;
  size_t nannots;
  ops_metrics *m;
  ops_metric *clients, *acks, *nacks, *send_failures, *recv_failures,
      *reconnections, *sizes, *stale, *pushes, *latency, *sent_bytes,
      *streams, *refused, *rate_limited;
  uint64_t rate_seen[2]; /* delayed, refused: counted so far (main thread) */
  atomic_int ready;
  /* Main thread. */
  const tool_transport *tp;
  void *ep;
  /* A page of the program's own (tool_ops_set_page). */
  const char *page_path;
  ops_http_fn page_fn;
  void *page_ud;
  ops_http_server *http;
  int port;
  /* Where the callbacks run (the transport's thread). */
  uint64_t dial_id; /* the dialed stream not yet known to be up */
  int dial_up;      /* it is up (something was received) */
  uint64_t established;
};

static const char *const L_COLLECTION[] = {"collection"};
static const char *const L_COLLECTION_CODE[] = {"collection", "code"};
static const char *const L_CODE[] = {"code"};
static const char *const L_OUTCOME[] = {"outcome"};

const char *tool_ops_code_name(int code, char *buf, size_t len) {
  static const char *const names[] = {
      "OK",           "Canceled",          "Unknown",
      "InvalidArgument", "DeadlineExceeded", "NotFound",
      "AlreadyExists", "PermissionDenied", "ResourceExhausted",
      "FailedPrecondition", "Aborted",      "OutOfRange",
      "Unimplemented", "Internal",          "Unavailable",
      "DataLoss",      "Unauthenticated"};
  if (code >= 0 && code <= 16)
    snprintf(buf, len, "%s", names[code]);
  else
    snprintf(buf, len, "Code(%d)", code);
  return buf;
}

void tool_ops_log_refused(const tool_stream_info *info) {
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

void tool_ops_log_dial_failure(const tool_stream_info *info,
                               const char *peer_role, int *failing) {
  int refused = info->status == 7 || info->status == 16;
  int kind = info->status ? info->status : -1;
  char name[24];
  if (*failing == kind)
    log_debug("stream %llu: %s %s: %s", (unsigned long long)info->id,
              refused ? "refused:" : "cannot reach", info->peer,
              info->details);
  else if (refused)
    log_warn("stream %llu to %s at %s refused: status %d (%s): %s; "
             "retrying",
             (unsigned long long)info->id, peer_role, info->peer,
             info->status, tool_ops_code_name(info->status, name, sizeof(name)),
             info->details);
  else
    log_warn("cannot reach %s at %s: %s; retrying", peer_role, info->peer,
             info->details);
  *failing = kind;
}

static int register_metrics(tool_ops *o) {
  ops_metrics *m = o->m;
  int source = o->o.role == TOOL_OPS_SOURCE;
  o->clients = ops_metrics_gauge(m, "istio_mcp_clients_total",
                                 "The number of streams currently connected.",
                                 NULL, 0);
  o->acks = ops_metrics_counter(
      m, "istio_mcp_request_acks_total",
      "ACKs: received by a source, sent by a sink, per collection.",
      L_COLLECTION, 1);
  o->nacks = ops_metrics_counter(
      m, "istio_mcp_request_nacks_total",
      "NACKs: received by a source, sent by a sink, per collection and "
      "gRPC code name.",
      L_COLLECTION_CODE, 2);
  o->send_failures = ops_metrics_counter(
      m, "istio_mcp_send_failures_total",
      "Dialed streams that failed before anything was received, per gRPC "
      "status code.",
      L_CODE, 1);
  o->recv_failures = ops_metrics_counter(
      m, "istio_mcp_recv_failures_total",
      "Connected streams that ended with an error status, per gRPC status "
      "code.",
      L_CODE, 1);
  o->reconnections = ops_metrics_counter(
      m, "istio_mcp_reconnections",
      "Streams connected after the first one (dialing side, listening sink).",
      NULL, 0);
  o->sizes = ops_metrics_histogram(
      m, "istio_mcp_message_sizes_bytes",
      "Size of the Resources messages sent by a source or received by a "
      "sink, per collection.",
      L_COLLECTION, 1, size_buckets,
      sizeof(size_buckets) / sizeof(size_buckets[0]));
  o->pushes = ops_metrics_counter(
      m, "mcp_pushes_total",
      "Pushes sent by a source, or received by a sink, per collection.",
      L_COLLECTION, 1);
  o->streams = ops_metrics_counter(
      m, "mcp_streams_total", "Streams connected since the start.", NULL, 0);
  o->refused = ops_metrics_counter(
      m, "mcp_streams_refused_total",
      "Calls refused before they became streams (listening side: "
      "authorization 16 UNAUTHENTICATED, 7 PERMISSION_DENIED; admission), "
      "per gRPC status code.",
      L_CODE, 1);
  o->rate_limited = ops_metrics_counter(
      m, "mcp_streams_rate_limited_total",
      "New streams past their peer's rate (--stream-rate; listening side): "
      "outcome=\"delayed\" waited for a token, outcome=\"refused\" ended "
      "with RESOURCE_EXHAUSTED.",
      L_OUTCOME, 1);
  if (!(o->clients && o->acks && o->nacks && o->send_failures &&
        o->recv_failures && o->reconnections && o->sizes && o->pushes &&
        o->streams && o->refused && o->rate_limited))
    return -1;
  if (!source)
    return 0;
  /* What only a source sees. */
  o->stale = ops_metrics_counter(
      m, "mcp_stale_requests_total",
      "Requests answering a push that is no longer the latest, per "
      "collection.",
      L_COLLECTION, 1);
  o->latency = ops_metrics_histogram(
      m, "mcp_push_ack_latency_seconds",
      "Time from a push being produced to its ACK.", NULL, 0,
      latency_buckets, sizeof(latency_buckets) / sizeof(latency_buckets[0]));
  o->sent_bytes = ops_metrics_counter(
      m, "mcp_sent_bytes_total",
      "Bytes of the Resources messages sent (encoded, without framing).",
      NULL, 0);
  return o->stale && o->latency && o->sent_bytes ? 0 : -1;
}

int tool_ops_new(tool_ops **pops, const tool_ops_options *opts) {
  tool_ops *o = calloc(1, sizeof(*o));
  if (!o)
    return -1;
  o->o = *opts;
  o->o.node_id = NULL;
  o->o.node_annotations = NULL;
  o->o.nnode_annotations = 0;
  atomic_init(&o->ready, 0);
  int ok = (o->m = ops_metrics_new()) != NULL;
  if (ok && opts->component)
    ok = ops_metrics_const_label(o->m, "component", opts->component) == 0;
  if (ok)
    ok = register_metrics(o) == 0;
  if (ok && opts->node_id)
    ok = (o->node_id = strdup(opts->node_id)) != NULL;
  if (ok && opts->nnode_annotations) {
    o->annots = calloc(opts->nnode_annotations, sizeof(*o->annots));
    ok = o->annots != NULL;
    for (size_t i = 0; ok && i < opts->nnode_annotations; i++) {
      o->annots[i].key = strdup(opts->node_annotations[i].key);
      o->annots[i].value = strdup(opts->node_annotations[i].value);
      o->nannots = i + 1;
      ok = o->annots[i].key && o->annots[i].value;
    }
  }
  if (!ok) {
    tool_ops_del(o);
    return -1;
  }
  *pops = o;
  return 0;
}

void tool_ops_del(tool_ops *o) {
  if (!o)
    return;
  ops_metrics_del(o->m);
  free(o->node_id);
  for (size_t i = 0; i < o->nannots; i++) {
    free((char *)o->annots[i].key);
    free((char *)o->annots[i].value);
  }
  free(o->annots);
  free(o);
}

ops_metrics *tool_ops_metrics(tool_ops *o) { return o->m; }

/* ---- command line ---- */

/* "HOST:PORT" with a non-empty host and a port in [0, 65535]. */
static int hostport_ok(const char *s) {
  const char *colon;
  if (s[0] == '[') {
    const char *close = strchr(s, ']');
    if (!close || close == s + 1 || close[1] != ':')
      return 0;
    colon = close + 1;
  } else {
    colon = strrchr(s, ':');
    if (!colon || colon == s || memchr(s, ':', (size_t)(colon - s)))
      return 0;
  }
  const char *p = colon + 1;
  size_t n = strlen(p);
  if (n == 0 || n > 5 || strspn(p, "0123456789") != n)
    return 0;
  return atol(p) <= 65535;
}

int tool_ops_parse_arg(int argc, char **argv, int *i, tool_ops_args *a) {
  static const char *const names[] = {"--debug-listen", "--log-format"};
  for (size_t k = 0; k < 2; k++) {
    const char *arg = argv[*i], *v;
    size_t n = strlen(names[k]);
    if (strncmp(arg, names[k], n) != 0 || (arg[n] != '\0' && arg[n] != '='))
      continue;
    if (arg[n] == '=') {
      v = arg + n + 1;
    } else if (*i + 1 < argc) {
      v = argv[++*i];
    } else {
      fprintf(stderr, "%s: option %s needs a value\n", tool_log_prog(),
              names[k]);
      return -1;
    }
    if (k == 0) {
      if (!hostport_ok(v)) {
        fprintf(stderr, "%s: --debug-listen %s: expected HOST:PORT (port in "
                        "[0, 65535], IPv6 in brackets)\n",
                tool_log_prog(), v);
        return -1;
      }
      a->debug_listen = v;
    } else if (tool_log_parse_format(v, &a->log_format) != 0) {
      fprintf(stderr, "%s: --log-format: expected text or json, not %s\n",
              tool_log_prog(), v);
      return -1;
    }
    return 1;
  }
  return 0;
}

/* ---- feeding the metrics (the transport's thread) ---- */

static void stream_up(tool_ops *o) {
  ops_metric_add(o->clients, NULL, 1);
  ops_metric_inc(o->streams, NULL);
  o->established++;
}

static void stream_down(tool_ops *o, const tool_stream_info *info) {
  ops_metric_add(o->clients, NULL, -1);
  /* CANCELLED on a stream we accepted is the client ending its call (a
   * sink or source exiting cleanly): not a failure. */
  int client_left = !info->dialed && info->status == MCP_CODE_CANCELLED;
  if (info->status != 0 && !client_left) {
    char code[16];
    snprintf(code, sizeof(code), "%d", info->status);
    const char *v[] = {code};
    ops_metric_inc(o->recv_failures, v);
  }
}

/* A dialed stream is up once anything came back: it then counts as a
 * client, and as a reconnection unless it is the first. */
static void dial_up(tool_ops *o) {
  if (!o->dial_id || o->dial_up)
    return;
  o->dial_up = 1;
  if (o->established > 0)
    ops_metric_inc(o->reconnections, NULL);
  stream_up(o);
}

void tool_ops_stream(tool_ops *o, int opened, const tool_stream_info *info) {
  if (!o)
    return;
  if (opened) {
    if (info->dialed) {
      o->dial_id = info->id;
      o->dial_up = 0;
      return;
    }
    if (o->o.role == TOOL_OPS_SINK && o->established > 0)
      ops_metric_inc(o->reconnections, NULL);
    stream_up(o);
    return;
  }
  if (!info->dialed) {
    stream_down(o, info);
    return;
  }
  if (info->id != o->dial_id)
    return;
  if (!o->dial_up && info->received > 0)
    dial_up(o);
  if (o->dial_up) {
    stream_down(o, info);
  } else if (info->status != 0) {
    char code[16];
    snprintf(code, sizeof(code), "%d", info->status);
    const char *v[] = {code};
    ops_metric_inc(o->send_failures, v);
  }
  o->dial_id = 0;
  o->dial_up = 0;
}

void tool_ops_refused(tool_ops *o, const tool_stream_info *info) {
  if (!o)
    return;
  char code[16];
  snprintf(code, sizeof(code), "%d", info->status);
  const char *v[] = {code};
  ops_metric_inc(o->refused, v);
}

void tool_ops_event(tool_ops *o, const mcp_event *ev) {
  if (!o)
    return;
  dial_up(o); /* an event is something received on the dialed stream */
  const char *c[] = {ev->collection ? ev->collection : ""};
  switch (ev->type) {
  case MCP_EVENT_PUSH:
    ops_metric_inc(o->pushes, c);
    ops_metric_observe(o->sizes, c, (double)ev->bytes);
    ops_metric_add(o->sent_bytes, NULL, (double)ev->bytes);
    break;
  case MCP_EVENT_ACK:
    ops_metric_inc(o->acks, c);
    if (o->o.role == TOOL_OPS_SOURCE) {
      ops_metric_observe(o->latency, NULL,
                         (double)ev->latency / (double)MCP_SECONDS);
    } else {
      ops_metric_inc(o->pushes, c);
      ops_metric_observe(o->sizes, c, (double)ev->bytes);
    }
    break;
  case MCP_EVENT_NACK: {
    char name[24];
    const char *v[] = {c[0], tool_ops_code_name(ev->code, name, sizeof(name))};
    ops_metric_inc(o->nacks, v);
    if (o->o.role == TOOL_OPS_SINK) {
      ops_metric_inc(o->pushes, c);
      ops_metric_observe(o->sizes, c, (double)ev->bytes);
    }
    break;
  }
  case MCP_EVENT_STALE:
    ops_metric_inc(o->stale, c);
    break;
  case MCP_EVENT_REQUEST:
  case MCP_EVENT_UNKNOWN_COLLECTION:
  case MCP_EVENT_TRIGGER_IGNORED:
    break;
  }
}

/* ---- main thread ---- */

void tool_ops_attach(tool_ops *o, const tool_transport *tp, void *ep) {
  o->tp = tp;
  o->ep = ep;
}

void tool_ops_detach(tool_ops *o) {
  if (!o)
    return;
  o->tp = NULL;
  o->ep = NULL;
}

void tool_ops_set_ready(tool_ops *o, int ready) {
  if (o)
    atomic_store(&o->ready, ready ? 1 : 0);
}

int tool_ops_listen(tool_ops *o, uv_loop_t *loop, const char *hostport,
                    const ops_http_options *ho, char *err, size_t errlen) {
  int rv = ops_http_server_new(&o->http, loop, hostport, ho, tool_ops_http,
                               o, err, errlen);
  if (rv != 0) {
    o->http = NULL;
    return -1;
  }
  o->port = ops_http_server_port(o->http);
  return 0;
}

int tool_ops_port(const tool_ops *o) { return o->port; }

void tool_ops_close(tool_ops *o) {
  if (!o)
    return;
  tool_ops_detach(o);
  ops_http_server_close(o->http);
  o->http = NULL;
}

/* ---- pages ---- */

#define PAGE_FIELD_MAX 256
#define PAGE_STREAMS_MAX 100
#define PAGE_BYTES_MAX ((size_t)1 << 20)
/* What a JSON member costs besides its strings (name, quotes, indentation),
 * for the page's budget: an estimate, on the high side. */
#define PAGE_MEMBER 40

double tool_ops_seconds(mcp_tstamp t) {
  return (double)((t + MCP_MILLISECONDS / 2) / MCP_MILLISECONDS) / 1000.0;
}

/* One page being built: its bounds and what it has spent. */
typedef struct page {
  size_t field_max, streams_max, bytes_max;
  size_t bytes;        /* estimated size so far */
  size_t streams, streams_omitted;
  int truncated;       /* the byte budget stopped something */
} page;

static void page_init(page *pg, const tool_ops *o) {
  memset(pg, 0, sizeof(*pg));
  pg->field_max = o->o.page_field_max ? o->o.page_field_max : PAGE_FIELD_MAX;
  pg->streams_max =
      o->o.page_streams_max ? o->o.page_streams_max : PAGE_STREAMS_MAX;
  pg->bytes_max = o->o.page_bytes_max ? o->o.page_bytes_max : PAGE_BYTES_MAX;
}

/* 1 when the page may take |n| more bytes (and counts them); else marks
 * it truncated. */
static int page_take(page *pg, size_t n) {
  if (pg->bytes + n > pg->bytes_max) {
    pg->truncated = 1;
    return 0;
  }
  pg->bytes += n;
  return 1;
}

/* A string of the page, cut to field_max bytes (at a UTF-8 boundary) with
 * "...[+N bytes]" after it, and counted. Strings from the core are UTF-8. */
static json_t *pstr(page *pg, const char *s) {
  s = s ? s : "";
  size_t n = strlen(s);
  pg->bytes += PAGE_MEMBER;
  if (n <= pg->field_max) {
    pg->bytes += n;
    return json_string(s);
  }
  size_t cut = pg->field_max;
  while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80)
    cut--;
  char tail[48];
  int tl = snprintf(tail, sizeof(tail), "...[+%zu bytes]", n - cut);
  char *b = malloc(cut + (size_t)tl + 1);
  if (!b)
    return NULL;
  memcpy(b, s, cut);
  memcpy(b + cut, tail, (size_t)tl + 1);
  pg->bytes += cut + (size_t)tl;
  json_t *j = json_string(b);
  free(b);
  return j;
}

static json_t *node_json(page *pg, const char *id, const mcp_kv *kv,
                         size_t n) {
  json_t *a = json_object();
  json_t *node = json_object();
  if (!a || !node) {
    json_decref(a);
    json_decref(node);
    return NULL;
  }
  json_object_set_new(node, "id", pstr(pg, id));
  size_t i = 0;
  for (; i < n && page_take(pg, 0); i++) {
    json_t *k = pstr(pg, kv[i].key); /* the key, cut as the value is */
    if (k)
      json_object_set_new(a, json_string_value(k), pstr(pg, kv[i].value));
    json_decref(k);
  }
  json_object_set_new(node, "annotations", a);
  if (i < n)
    json_object_set_new(node, "annotations_omitted",
                        json_integer((json_int_t)(n - i)));
  return node;
}

static json_t *status_json(page *pg, const mcp_collection_status *st,
                           int sink) {
  json_t *o = json_object();
  if (!o)
    return NULL;
  pg->bytes += 14 * PAGE_MEMBER;
  json_object_set_new(o, "collection", pstr(pg, st->collection));
  json_object_set_new(o, "known", json_boolean(st->known));
  json_object_set_new(o, "incremental", json_boolean(st->incremental));
  json_object_set_new(o, "acked_version", pstr(pg, st->acked_version));
  json_object_set_new(o, "pending_version", pstr(pg, st->pending_version));
  json_object_set_new(o, "pending_nonce", pstr(pg, st->pending_nonce));
  json_object_set_new(o, "pending_nonce_age_seconds",
                      json_real(tool_ops_seconds(st->pending_age)));
  json_object_set_new(o, "last_nack_code", json_integer(st->last_nack_code));
  json_object_set_new(o, "last_nack_message",
                      pstr(pg, st->last_nack_message));
  json_object_set_new(o, "pushes", json_integer((json_int_t)st->pushes));
  json_object_set_new(o, "acks", json_integer((json_int_t)st->acks));
  json_object_set_new(o, "nacks", json_integer((json_int_t)st->nacks));
  json_object_set_new(o, "stale", json_integer((json_int_t)st->stale));
  if (st->type_url)
    json_object_set_new(o, "type_url", pstr(pg, st->type_url));
  if (sink) {
    json_object_set_new(o, "held", json_integer((json_int_t)st->held));
    json_object_set_new(o, "last_nonce", pstr(pg, st->last_nonce));
  }
  return o;
}

/* What the transport knows of a stream (no session data). */
static json_t *stream_json(page *pg, const tool_stream_info *info,
                           mcp_tstamp now) {
  json_t *ids = json_array();
  for (size_t i = 0; ids && i < info->nidentities && page_take(pg, 0); i++)
    json_array_append_new(ids, pstr(pg, info->identities[i]));
  json_t *s = json_object();
  if (!s) {
    json_decref(ids);
    return NULL;
  }
  pg->bytes += 9 * PAGE_MEMBER;
  json_object_set_new(s, "id", json_integer((json_int_t)info->id));
  json_object_set_new(s, "peer", pstr(pg, info->peer));
  json_object_set_new(s, "dialed", json_boolean(info->dialed));
  json_object_set_new(s, "tls", json_boolean(info->tls));
  json_object_set_new(
      s, "identity", pstr(pg, info->nidentities ? info->identities[0] : ""));
  json_object_set_new(s, "identities", ids ? ids : json_array());
  json_object_set_new(s, "age_seconds",
                      json_real(info->opened && now > info->opened
                                    ? tool_ops_seconds(now - info->opened)
                                    : 0.0));
  json_object_set_new(s, "received", json_integer((json_int_t)info->received));
  json_object_set_new(s, "sent", json_integer((json_int_t)info->sent));
  return s;
}

/* An xDS stream (mcp/xds.h): the node istiod sent (id, metadata) and one
 * entry per type subscribed, in "collections". */
static void xds_stream_json(page *pg, json_t *s, json_t *colls,
                            const mcp_stream *st) {
  mcp_xds_stream_info xi;
  mcp_xds_stream_info_get(st, &xi);
  json_object_set_new(s, "node", node_json(pg, xi.node_id, xi.node_metadata,
                                           xi.nnode_metadata));
  json_object_set_new(s, "delta", json_boolean(xi.delta));
  json_object_set_new(s, "acks", json_integer((json_int_t)xi.acks));
  json_object_set_new(s, "nacks", json_integer((json_int_t)xi.nacks));
  json_object_set_new(s, "stale", json_integer((json_int_t)xi.stale));
  size_t i = 0;
  for (; colls && i < xi.ntypes && page_take(pg, 0); i++) {
    mcp_xds_type_info ti;
    if (mcp_xds_stream_type_get(st, i, &ti) != 0)
      continue;
    json_t *c = json_object();
    if (!c)
      continue;
    pg->bytes += 9 * PAGE_MEMBER;
    json_object_set_new(c, "type_url", pstr(pg, ti.type_url));
    json_object_set_new(c, "collection", ti.collection
                                             ? pstr(pg, ti.collection)
                                             : json_null());
    json_object_set_new(c, "version_sent", pstr(pg, ti.version_sent));
    json_object_set_new(c, "version_acked", pstr(pg, ti.version_acked));
    json_object_set_new(c, "pending_nonce", pstr(pg, ti.pending_nonce));
    json_object_set_new(c, "nacks", json_integer((json_int_t)ti.nacks));
    json_object_set_new(c, "last_nack", pstr(pg, ti.last_nack));
    json_object_set_new(c, "wildcard", json_boolean(ti.wildcard));
    json_object_set_new(c, "names", json_integer((json_int_t)ti.nnames));
    json_array_append_new(colls, c);
  }
  if (i < xi.ntypes)
    json_object_set_new(s, "collections_omitted",
                        json_integer((json_int_t)(xi.ntypes - i)));
}

typedef struct walk {
  tool_ops *o;
  page pg;
  json_t *streams;
  json_t *collections; /* sink */
  json_t *journal;     /* sink */
  size_t journal_omitted;
  int synced;
} walk;

/* A stream beyond the page's bounds is only counted. */
static int stream_fits(walk *w) {
  if (w->pg.streams >= w->pg.streams_max || !page_take(&w->pg, 0)) {
    w->pg.streams_omitted++;
    return 0;
  }
  w->pg.streams++;
  return 1;
}

/* The transport's thread: one source stream. */
static void source_stream_fn(const tool_stream_info *info, void *ud) {
  walk *w = ud;
  if (!stream_fits(w))
    return;
  mcp_tstamp now = w->o->tp->now();
  json_t *s = stream_json(&w->pg, info, now);
  if (!s)
    return;
  json_t *colls = json_array();
  /* The protocol of the call: "mcp", or another API's (engine.h) method
   * name ("destination", "assignments", ...). */
  json_object_set_new(s, "api", json_string(info->api ? info->api : "mcp"));
  if (info->stream && mcp_xds_stream_is(info->stream)) {
    xds_stream_json(&w->pg, s, colls, info->stream);
  } else if (info->source) {
    const mcp_sink_node *n = mcp_source_session_node(info->source);
    json_object_set_new(s, "node",
                        node_json(&w->pg, n ? n->id : "",
                                  n ? n->annotations : NULL,
                                  n ? n->nannotations : 0));
    json_object_set_new(
        s, "stale_unknown",
        json_integer((json_int_t)mcp_source_session_stale_unknown(
            info->source)));
    size_t nc = mcp_source_session_collection_count(info->source), i = 0;
    for (; colls && i < nc && page_take(&w->pg, 0); i++) {
      mcp_collection_status st;
      if (mcp_source_session_collection_status(info->source, i, now, &st) ==
          0)
        json_array_append_new(colls, status_json(&w->pg, &st, 0));
    }
    if (i < nc)
      json_object_set_new(s, "collections_omitted",
                          json_integer((json_int_t)(nc - i)));
  } else {
    json_object_set_new(s, "node", node_json(&w->pg, "", NULL, 0));
  }
  json_object_set_new(s, "collections", colls ? colls : json_array());
  json_array_append_new(w->streams, s);
}

static void sink_stream_fn(const tool_stream_info *info, void *ud) {
  walk *w = ud;
  if (!stream_fits(w))
    return;
  json_t *s = stream_json(&w->pg, info, w->o->tp->now());
  if (s) {
    json_object_set_new(s, "session", json_boolean(info->sink != NULL));
    json_array_append_new(w->streams, s);
  }
}

static const char *journal_kind(int kind) {
  switch (kind) {
  case MCP_EVENT_REQUEST: return "request";
  case MCP_EVENT_ACK: return "ack";
  case MCP_EVENT_NACK: return "nack";
  default: return "other";
  }
}

/* The transport's thread: the sink state. */
static void sink_state_fn(mcp_sink_state *state, mcp_tstamp ts, void *ud) {
  walk *w = ud;
  w->synced = mcp_sink_state_synced(state);
  if (w->collections) {
    size_t n = mcp_sink_state_collection_count(state);
    for (size_t i = 0; i < n && page_take(&w->pg, 0); i++) {
      mcp_collection_status st;
      if (mcp_sink_state_collection_status(state, i, ts, &st) == 0)
        json_array_append_new(w->collections, status_json(&w->pg, &st, 1));
    }
  }
  if (w->journal) {
    /* The newest entries matter most: when the page cannot hold them all,
     * the oldest are left out. */
    size_t n = mcp_sink_state_journal_count(state), first = 0;
    size_t each = 7 * PAGE_MEMBER + 3 * w->pg.field_max + 64;
    size_t room = w->pg.bytes_max > w->pg.bytes
                      ? (w->pg.bytes_max - w->pg.bytes) / each
                      : 0;
    if (n > room) {
      first = n - room;
      w->journal_omitted = first;
      w->pg.truncated = 1;
    }
    for (size_t i = first; i < n; i++) {
      mcp_journal_entry e;
      if (mcp_sink_state_journal_entry(state, i, &e) != 0)
        continue;
      json_t *j = json_object();
      if (!j)
        continue;
      w->pg.bytes += 7 * PAGE_MEMBER;
      json_object_set_new(
          j, "age_seconds",
          json_real(ts > e.ts ? tool_ops_seconds(ts - e.ts) : 0.0));
      json_object_set_new(j, "kind", json_string(journal_kind(e.kind)));
      json_object_set_new(j, "collection", pstr(&w->pg, e.collection));
      json_object_set_new(j, "nonce", pstr(&w->pg, e.nonce));
      json_object_set_new(j, "code", json_integer(e.code));
      json_object_set_new(j, "message", pstr(&w->pg, e.message));
      json_object_set_new(j, "initial_versions",
                          json_integer((json_int_t)e.ninitial));
      json_array_append_new(w->journal, j);
    }
  }
}

/* The page's own account of what it left out. */
static void page_bounds(json_t *j, const page *pg, int streams) {
  if (!j)
    return;
  if (streams) {
    json_object_set_new(j, "streams_omitted",
                        json_integer((json_int_t)pg->streams_omitted));
  }
  json_object_set_new(j, "truncated",
                      json_boolean(pg->truncated || pg->streams_omitted));
}

void tool_ops_reply_json(ops_http_reply *r, json_t *j, size_t flags) {
  /* jansson writes reals with 17 digits (1.99 as 1.9899999999999999); 15
   * is the shortest form that reads back the same for every number of at
   * most 15 significant digits, such as our millisecond ages. */
  if (!(flags & JSON_REAL_PRECISION(31)))
    flags |= JSON_REAL_PRECISION(15);
  char *s = j ? json_dumps(j, flags) : NULL;
  json_decref(j);
  if (!s) {
    ops_http_reply_text(r, 500, "out of memory\n");
    return;
  }
  r->status = 200;
  r->content_type = "application/json";
  ops_buf_reset(&r->body);
  ops_buf_str(&r->body, s);
  ops_buf_str(&r->body, "\n");
  free(s);
}

static void page_syncz(tool_ops *o, ops_http_reply *r) {
  if (!o->tp || !o->ep) {
    ops_http_reply_text(r, 503, "not running\n");
    return;
  }
  walk w = {.o = o, .streams = json_array()};
  page_init(&w.pg, o);
  json_t *j;
  int rv = -1;
  if (o->o.role == TOOL_OPS_SOURCE) {
    if (o->tp->source_streams)
      rv = o->tp->source_streams(o->ep, source_stream_fn, &w);
    j = json_pack("{s:s, s:o}", "role", "source", "streams", w.streams);
  } else {
    w.collections = json_array();
    if (o->tp->sink_streams && o->tp->sink_call) {
      rv = o->tp->sink_streams(o->ep, sink_stream_fn, &w);
      if (rv >= 0)
        rv = o->tp->sink_call(o->ep, sink_state_fn, &w);
    }
    j = json_pack("{s:s, s:o, s:b, s:o, s:o}", "role", "sink", "node",
                  node_json(&w.pg, o->node_id, o->annots, o->nannots),
                  "synced", w.synced, "streams", w.streams, "collections",
                  w.collections);
  }
  page_bounds(j, &w.pg, 1);
  if (rv < 0) {
    json_decref(j);
    ops_http_reply_text(r, 503, "the transport cannot be read\n");
    return;
  }
  tool_ops_reply_json(r, j, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
}

static void page_journal(tool_ops *o, ops_http_reply *r) {
  if (!o->tp || !o->ep || !o->tp->sink_call) {
    ops_http_reply_text(r, 503, "not running\n");
    return;
  }
  walk w = {.o = o, .journal = json_array()};
  page_init(&w.pg, o);
  int rv = o->tp->sink_call(o->ep, sink_state_fn, &w);
  json_t *j = json_pack("{s:o}", "journal", w.journal);
  if (j && w.journal_omitted)
    json_object_set_new(j, "journal_omitted",
                        json_integer((json_int_t)w.journal_omitted));
  page_bounds(j, &w.pg, 0);
  if (rv < 0) {
    json_decref(j);
    ops_http_reply_text(r, 503, "the transport cannot be read\n");
    return;
  }
  tool_ops_reply_json(r, j, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
}

static int is_ready(tool_ops *o) {
  if (atomic_load(&o->ready))
    return 1;
  if (o->o.role != TOOL_OPS_SINK || !o->tp || !o->ep || !o->tp->sink_call)
    return 0;
  walk w = {.o = o};
  page_init(&w.pg, o);
  if (o->tp->sink_call(o->ep, sink_state_fn, &w) < 0 || !w.synced)
    return 0;
  atomic_store(&o->ready, 1); /* synced stays synced */
  return 1;
}

static const struct route {
  const char *path;
  int sink_only;
} routes[] = {{"/metrics", 0},   {"/debug/syncz", 0}, {"/debug/journal", 1},
              {"/healthz", 0},   {"/readyz", 0},      {"/", 0}};

/* The transport's per-peer rate counters into the metric, at each scrape
 * (main thread). */
static void rate_limited_update(tool_ops *o) {
  mcp_transport_stats st;
  if (!o->tp || !o->ep || !o->tp->stats || o->tp->stats(o->ep, &st) < 0)
    return;
  uint64_t now[2] = {st.peer_rate_delayed, st.refused_peer_rate};
  static const char *const outcome[2] = {"delayed", "refused"};
  for (int i = 0; i < 2; i++) {
    if (now[i] > o->rate_seen[i]) {
      const char *lv[] = {outcome[i]};
      ops_metric_add(o->rate_limited, lv, (double)(now[i] - o->rate_seen[i]));
      o->rate_seen[i] = now[i];
    }
  }
}

void tool_ops_set_page(tool_ops *o, const char *path, ops_http_fn fn,
                       void *ud) {
  o->page_path = path;
  o->page_fn = fn;
  o->page_ud = ud;
}

void tool_ops_http(const char *method, const char *path, ops_http_reply *r,
                   void *ud) {
  tool_ops *o = ud;
  size_t plen = strcspn(path, "?");
  const struct route *rt = NULL;
  for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
    if (strlen(routes[i].path) == plen &&
        memcmp(routes[i].path, path, plen) == 0 &&
        (!routes[i].sink_only || o->o.role == TOOL_OPS_SINK))
      rt = &routes[i];
  }
  if (!rt && o->page_path && strlen(o->page_path) == plen &&
      memcmp(o->page_path, path, plen) == 0) {
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
      ops_http_reply_text(r, 405, "method not allowed\n");
      r->allow = "GET, HEAD";
      return;
    }
    o->page_fn(method, path, r, o->page_ud);
    return;
  }
  if (!rt) {
    ops_http_reply_text(r, 404, "not found\n");
    return;
  }
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    ops_http_reply_text(r, 405, "method not allowed\n");
    r->allow = "GET, HEAD";
    return;
  }
  if (strcmp(rt->path, "/metrics") == 0) {
    rate_limited_update(o);
    r->status = 200;
    r->content_type = OPS_METRICS_CONTENT_TYPE;
    if (ops_metrics_render(o->m, &r->body) != 0)
      ops_http_reply_text(r, 500, "out of memory\n");
  } else if (strcmp(rt->path, "/debug/syncz") == 0) {
    page_syncz(o, r);
  } else if (strcmp(rt->path, "/debug/journal") == 0) {
    page_journal(o, r);
  } else if (strcmp(rt->path, "/healthz") == 0) {
    ops_http_reply_text(r, 200, "ok\n");
  } else if (strcmp(rt->path, "/readyz") == 0) {
    if (is_ready(o))
      ops_http_reply_text(r, 200, "ready\n");
    else
      ops_http_reply_text(r, 503, o->o.role == TOOL_OPS_SINK
                                      ? "not synced yet\n"
                                      : "not loaded yet\n");
  } else {
    ops_http_reply_text(r, 200,
                        o->o.role == TOOL_OPS_SINK
                            ? "/metrics\n/debug/syncz\n/debug/journal\n"
                              "/healthz\n/readyz\n"
                            : "/metrics\n/debug/syncz\n/healthz\n/readyz\n");
  }
}
