/*
 * mcp-sink --api destination|dispatcher: sink_proto.h.
 *
 * Threads: the main thread runs a libuv loop (signals, the exit after
 * sync). The protocol's objects (the Destination sets, the Dispatcher
 * agent) live where the transport's client runs (gRPC: a thread of its
 * own; h2c: the loop), and so do their callbacks, which do all the output
 * (JSON lines through tool_out_line(), files); they tell the main loop
 * about the sync through a uv_async_t.
 */
#include "mcp-sink/sink_proto.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include <mcp/engine.h>
#include <mcp/mcp.h>
#include <mcp/schema.h>
#include <mcp/destination.h>
#include <mcp/dispatcher.h>
#include <mcp/schema_istio.h>
#include <mcp/xds.h>

#include "cli/args.h"
#include "util/log.h"
#include "cli/proc.h"
#include "util/rand.h"
#include "transport/transport.h"
#include "views/schema_swarmkit.h"
#include "views/view_util.h"
#include "mcp-sink/mirror.h"

#define DEFAULT_ADDRESS "127.0.0.1:9901"

enum { P_DEST = 1, P_DISP = 2, P_XDS = 3 };

typedef struct dest_slot {
  const char *authority;
  mcp_dest_set *set;
  int synced;
  char *file; /* --out: DIR/<authority>.json */
} dest_slot;

typedef struct proto_app {
  uv_loop_t loop;
  const tool_transport *tp;
  void *client;
  tool_tls_watch *tls_watch; /* a broken replacement of the TLS files is said */
  int api;
  int json, exit_after_sync;
  const char *out;
  uv_signal_t sigint, sigterm;
  uv_async_t synced_async;
  int stopping;
  atomic_int synced;
  /* Transport thread. */
  dest_slot *slots;
  size_t nslots, nsynced;
  mcp_dest_agent *dagent; /* the calls and their reconnection */
  mcp_disp_agent *agent;
  mcp_schema *schema; /* swarmkit's types, for --out */
  vmap held;          /* --out, dispatcher: "<kind>/<id>" -> (void *)1 */
  int failed;         /* an output could not be written */
  /* xDS (transport thread): one ADS call at a time. */
  int delta;
  tool_strv types;    /* --type, else adsc's: MeshConfig, Istio's kinds */
  const char *node_id;
  mcp_xds_held *xheld;
  tool_mirror *mirror; /* --out */
  unsigned char *xsynced; /* per type: a response came */
  size_t nxsynced;
  mcp_redial xredial; /* the core's reconnection: the ADS call */
  uint64_t xresponses, xresponses_at_open;
} proto_app;

/* The short usage: mcp-sink's --help has every flag. */
static void usage(FILE *f) {
  fputs("usage: " TOOL_SINK_PROTO_SYNOPSIS "(mcp-sink --help: every flag)\n",
        f);
}

#define usage_error(...) tool_usage_error("mcp-sink", usage, __VA_ARGS__)

int tool_sink_proto_wanted(int argc, char **argv) {
  for (int i = 1; i < argc; i++) /* mcp-sink's own answer */
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") ||
        !strcmp(argv[i], "--version"))
      return 0;
  for (int i = 1; i < argc; i++) {
    const char *v = NULL;
    if (!strcmp(argv[i], "--api") && i + 1 < argc)
      v = argv[i + 1];
    else if (!strncmp(argv[i], "--api=", 6))
      v = argv[i] + 6;
    if (v && (!strcmp(v, "destination") || !strcmp(v, "dispatcher") ||
              !strcmp(v, "xds")))
      return 1;
  }
  return 0;
}

/* ---- output ---- */

static void emit(proto_app *a, json_t *obj) {
  if (a->json && obj) {
    char *s = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (s)
      tool_out_line(s);
    free(s);
  }
  json_decref(obj);
}

/* Creates the directories of |path| (not its last segment). */
static int make_parents(const char *path) {
  char *p = strdup(path);
  if (!p)
    return -1;
  for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
    *s = '\0';
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
      free(p);
      return -1;
    }
    *s = '/';
  }
  free(p);
  return 0;
}

/* Writes |len| bytes to |path| atomically: a temporary file beside it,
 * then rename(). 0, or -1 (logged). */
static int write_atomic(const char *path, const char *data,
                                        size_t len) {
  size_t n = strlen(path) + 16;
  char *tmp = malloc(n);
  if (!tmp || make_parents(path) != 0) {
    free(tmp);
    log_error("cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  snprintf(tmp, n, "%s.tmp%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int ok = fd >= 0;
  for (size_t off = 0; ok && off < len;) {
    ssize_t w = write(fd, data + off, len - off);
    if (w < 0 && errno == EINTR)
      continue;
    ok = w > 0;
    off += ok ? (size_t)w : 0;
  }
  if (fd >= 0 && close(fd) != 0)
    ok = 0;
  if (ok && rename(tmp, path) != 0)
    ok = 0;
  if (!ok) {
    log_error("cannot write %s: %s", path, strerror(errno));
    unlink(tmp);
  }
  free(tmp);
  return ok ? 0 : -1;
}

/* Adds a copy of |p[0..n)| to |sv| once. 0, or -1 when out of memory. */
static int add_copy(tool_strv *sv, const char *p, size_t n) {
  char *c = strndup(p, n);
  if (!c)
    return -1;
  size_t before = sv->n;
  if (tool_strv_add(sv, c, 1) != 0 || sv->n == before)
    free(c); /* out of memory, or given twice */
  return sv->n > before || sv->v ? 0 : -1;
}

static void note_synced(proto_app *a) {
  if (!atomic_exchange(&a->synced, 1))
    uv_async_send(&a->synced_async);
}

/* ---- Destination ---- */

static const char *update_name(mcp_dest_update_kind k) {
  return k == MCP_DEST_UPDATE_ADD      ? "add"
         : k == MCP_DEST_UPDATE_REMOVE ? "remove"
                                       : "no_endpoints";
}

static void on_dest_update(size_t slot, const mcp_dest_update *u, void *ud) {
  proto_app *a = ud;
  dest_slot *s = &a->slots[slot];
  /* The file first: whoever reads the line finds it written. */
  if (s->file) {
    json_t *addrs = json_array();
    size_t n = mcp_dest_set_count(s->set);
    for (size_t i = 0; addrs && i < n; i++) /* ascending strcmp order */
      json_array_append_new(addrs, json_string(mcp_dest_set_addr(s->set, i)));
    json_t *o = json_pack("{s:b, s:o}", "exists",
                          mcp_dest_set_exists(s->set), "addrs",
                          addrs ? addrs : json_array());
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (!text || write_atomic(s->file, text, strlen(text)) != 0)
      a->failed = 1;
    free(text);
  }
  if (a->json) {
    json_t *addrs = json_array();
    for (size_t i = 0; addrs && i < u->naddrs; i++)
      json_array_append_new(addrs, json_string(u->addrs[i]));
    json_t *o = json_pack("{s:s, s:s, s:s, s:o}", "event", "destination",
                          "authority", s->authority, "update",
                          update_name(u->kind), "addrs",
                          addrs ? addrs : json_array());
    if (o && u->kind == MCP_DEST_UPDATE_NO_ENDPOINTS)
      json_object_set_new(o, "exists", json_boolean(u->exists));
    if (o)
      json_object_set_new(o, "total", json_integer((json_int_t)u->total));
    emit(a, o);
  }
  if (u->first && !s->synced) {
    s->synced = 1;
    if (++a->nsynced == a->nslots) {
      log_info("every authority got its first message");
      if (a->exit_after_sync)
        note_synced(a);
    }
  }
}

/* The agent (core) reconnects; the program only says how a call went. */
static void on_dest_end(const mcp_dest_call_end *e, void *ud) {
  proto_app *a = ud;
  dest_slot *s = &a->slots[e->slot];
  if (e->error < 0) {
    log_error("%s: cannot open a stream: %s", s->authority,
              mcp_strerror(e->error));
    return;
  }
  if (!a->stopping)
    tool_log(e->received ? TOOL_LOG_INFO : TOOL_LOG_DEBUG,
             "%s: stream ended: status %d%s%s (after %llu update%s); "
             "reconnecting in %llu ms",
             s->authority, e->status, e->details[0] ? ": " : "", e->details,
             (unsigned long long)e->received, e->received == 1 ? "" : "s",
             (unsigned long long)(e->delay / MCP_MILLISECONDS));
}

/* ---- Dispatcher ---- */

static const char *kind_msg(int kind) {
  return kind == MCP_DISP_TASK     ? "docker.swarmkit.v1.Task"
         : kind == MCP_DISP_SECRET ? "docker.swarmkit.v1.Secret"
                                   : "docker.swarmkit.v1.Config";
}

/* DIR/<kind>s/<id>.json, or NULL for an id that cannot be a file name. */
static char *object_file(const proto_app *a, const char *kind,
                         const char *id) {
  if (!id[0] || strchr(id, '/') || !strcmp(id, ".") || !strcmp(id, ".."))
    return NULL;
  size_t n = strlen(a->out) + strlen(kind) + strlen(id) + 16;
  char *p = malloc(n);
  if (p)
    snprintf(p, n, "%s/%ss/%s.json", a->out, kind, id);
  return p;
}

static void out_update(proto_app *a, const mcp_disp_change *c) {
  const char *kind = mcp_disp_kind_name(c->kind);
  char *path = kind ? object_file(a, kind, c->id) : NULL;
  if (!path) {
    log_warn("--out: %s %s cannot be a file name: not written",
             kind ? kind : "object", c->id);
    return;
  }
  char *json = NULL;
  size_t len = 0;
  mcp_schema_error err;
  int rv = mcp_schema_to_json(a->schema, kind_msg(c->kind), c->object,
                              c->object_len, 0, &json, &len, &err);
  if (rv < 0) {
    log_warn("--out: %s %s: %s", kind, c->id, err.message);
  } else {
    if (write_atomic(path, json, len) != 0)
      a->failed = 1;
    mcp_schema_free_bytes(a->schema, json);
  }
  free(path);
}

static void out_remove(proto_app *a, int kind_num, const char *id) {
  const char *kind = mcp_disp_kind_name(kind_num);
  char *path = kind ? object_file(a, kind, id) : NULL;
  if (path && unlink(path) != 0 && errno != ENOENT) {
    log_error("cannot remove %s: %s", path, strerror(errno));
    a->failed = 1;
  }
  free(path);
}

static void on_assignments(const mcp_disp_event *ev, void *ud) {
  proto_app *a = ud;
  /* The files first: whoever reads the line finds them written. */
  if (a->out) {
    vmap now = {0};
    int complete = ev->type == MCP_DISP_COMPLETE;
    for (size_t i = 0; i < ev->nchanges; i++) {
      const mcp_disp_change *c = &ev->changes[i];
      char key[600];
      snprintf(key, sizeof key, "%d/%s", c->kind, c->id);
      if (c->action == MCP_DISP_REMOVE) {
        out_remove(a, c->kind, c->id);
        vmap_del(&a->held, key);
        continue;
      }
      out_update(a, c);
      if (vmap_put(&a->held, key, (void *)1) < 0 ||
          (complete && vmap_put(&now, key, (void *)1) < 0))
        a->failed = 1;
    }
    if (complete) {
      /* A COMPLETE replaces what was held: what it does not list goes. */
      char **gone = NULL;
      size_t ngone = 0, it = 0;
      const char *k;
      void *v;
      while (vmap_next(&a->held, &it, &k, &v)) {
        if (vmap_get(&now, k))
          continue;
        char **g = realloc(gone, (ngone + 1) * sizeof *g);
        if (!g || !(g[ngone] = strdup(k))) {
          free(g ? g : gone);
          gone = NULL;
          ngone = 0;
          a->failed = 1;
          break;
        }
        gone = g;
        ngone++;
      }
      for (size_t i = 0; i < ngone; i++) {
        char *slash = strchr(gone[i], '/');
        out_remove(a, atoi(gone[i]), slash + 1);
        vmap_del(&a->held, gone[i]);
        free(gone[i]);
      }
      free(gone);
    }
    vmap_free(&now);
  }
  if (a->json) {
    json_t *ch = json_array();
    for (size_t i = 0; ch && i < ev->nchanges; i++) {
      const mcp_disp_change *c = &ev->changes[i];
      const char *kind = mcp_disp_kind_name(c->kind);
      json_array_append_new(
          ch, json_pack("{s:s, s:s, s:s}", "action",
                        c->action == MCP_DISP_REMOVE ? "REMOVE" : "UPDATE",
                        "kind", kind ? kind : "unknown", "id", c->id));
    }
    emit(a, json_pack("{s:s, s:s, s:s, s:s, s:o, s:I}", "event",
                      "assignments", "type",
                      ev->type == MCP_DISP_COMPLETE ? "COMPLETE"
                                                    : "INCREMENTAL",
                      "applies_to", ev->applies_to ? ev->applies_to : "",
                      "results_in", ev->results_in ? ev->results_in : "",
                      "changes", ch ? ch : json_array(), "total",
                      (json_int_t)ev->total));
  }
  if (a->exit_after_sync)
    note_synced(a);
}


/* ---- xDS (an istiod-like client, mcp/xds.h) ---- */

/* The file first, then the line: whoever reads the line finds the files. */
static int on_xds_response(const mcp_xds_response *r, const char *rejected,
                           char *msg, size_t msglen, void *ud) {
  proto_app *a = ud;
  int code = 0;
  if (rejected) {
    snprintf(msg, msglen, "%s", rejected);
    code = MCP_CODE_INVALID_ARGUMENT;
  } else if (a->mirror && r->collection) {
    mcp_change ch = {.collection = r->collection,
                     .system_version_info = r->version,
                     .nonce = r->nonce,
                     .incremental = r->delta,
                     .resources = r->resources,
                     .nresources = r->nresources,
                     .removed = r->removed,
                     .nremoved = r->nremoved,
                     .complete = r->complete};
    code = tool_mirror_apply(a->mirror, &ch, msg, msglen);
  }
  if (code)
    log_warn("%s version %s (nonce %s) rejected: %s", r->type_url, r->version,
             r->nonce, msg);
  if (a->json) {
    json_t *res = json_array(), *rem = json_array();
    for (size_t i = 0; res && i < r->nresources; i++)
      json_array_append_new(
          res, json_pack("{s:s, s:s, s:s}", "name", r->resources[i].name,
                         "version", r->resources[i].version
                                        ? r->resources[i].version
                                        : "",
                         "type_url", r->resources[i].type_url));
    for (size_t i = 0; rem && i < r->nremoved; i++)
      json_array_append_new(rem, json_string(r->removed[i]));
    emit(a, json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:s}", "event",
                      "response", "type_url", r->type_url, "version_info",
                      r->version, "nonce", r->nonce, "resources",
                      res ? res : json_array(), "removed",
                      rem ? rem : json_array(), "verdict",
                      code ? "nack" : "ack"));
  }
  a->xresponses++;
  for (size_t i = 0; i < a->types.n; i++)
    if (!a->xsynced[i] && !strcmp(a->types.v[i], r->type_url)) {
      a->xsynced[i] = 1;
      if (++a->nxsynced == a->types.n) {
        log_info("every type was answered (%zu)", a->types.n);
        if (a->exit_after_sync)
          note_synced(a);
      }
    }
  return code;
}

static const char *xds_method(void *ud, size_t slot) {
  proto_app *a = ud;
  (void)slot;
  return a->delta ? MCP_XDS_METHOD_DELTA : MCP_XDS_METHOD_SOTW;
}

static int xds_open(void *ud, size_t slot, mcp_tstamp ts, mcp_stream **pst) {
  proto_app *a = ud;
  (void)slot;
  if (!mcp_redial_due(&a->xredial, ts))
    return 0;
  /* adsc's initial nonce: the time, as Go's time.Now().String() starts. */
  char nonce[64];
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(nonce, sizeof nonce, "%Y-%m-%d %H:%M:%S +0000 UTC", &tm);
  static const mcp_kv md[] = {{"GENERATOR", "api"},
                              {"ISTIO_VERSION", "65536.65536.65536"}};
  mcp_xds_client_options o = {.held = a->xheld,
                              .delta = a->delta,
                              .type_urls = a->types.v,
                              .ntypes = a->types.n,
                              .node_id = a->node_id,
                              .node_metadata = md,
                              .nnode_metadata = 2,
                              .initial_nonce = nonce,
                              .on_response = on_xds_response,
                              .user_data = a};
  int rv = mcp_xds_client_open(pst, &o, ts);
  if (rv < 0) {
    log_error("cannot open an xDS stream: %s", mcp_strerror(rv));
    (void)mcp_redial_ended(&a->xredial, ts);
    return 0;
  }
  mcp_redial_opened(&a->xredial, ts);
  a->xresponses_at_open = a->xresponses;
  return 1;
}

static void xds_ended(void *ud, size_t slot, int status, const char *details,
                      mcp_tstamp ts) {
  proto_app *a = ud;
  (void)slot;
  uint64_t received = a->xresponses - a->xresponses_at_open;
  mcp_redial_received(&a->xredial, received);
  mcp_tstamp delay = mcp_redial_ended(&a->xredial, ts);
  if (!a->stopping)
    tool_log(received ? TOOL_LOG_INFO : TOOL_LOG_DEBUG,
             "xDS stream ended: status %d%s%s (after %llu response%s); "
             "reconnecting in %llu ms%s",
             status, details && details[0] ? ": " : "", details ? details : "",
             (unsigned long long)received, received == 1 ? "" : "s",
             (unsigned long long)(delay / MCP_MILLISECONDS),
             a->delta ? " with what is held" : "");
}

static mcp_tstamp xds_expiry(void *ud) {
  proto_app *a = ud;
  return mcp_redial_at(&a->xredial); /* MAX while the call is open */
}

/* adsc's ConfigInitialRequests: MeshConfig, then every Istio type the
 * schema knows. 0, or -1 (out of memory). */
static int default_types(tool_strv *types) {
  size_t n;
  const mcp_schema_istio_kind *k = mcp_schema_istio_kinds(&n);
  if (add_copy(types, MCP_XDS_MESH_TYPE, strlen(MCP_XDS_MESH_TYPE)) != 0)
    return -1;
  for (size_t i = 0; i < n; i++) {
    char buf[256];
    int l = snprintf(buf, sizeof buf, "%s/%s", k[i].api_version, k[i].kind);
    if (l < 0 || (size_t)l >= sizeof buf || add_copy(types, buf, (size_t)l))
      return -1;
  }
  return 0;
}

/* --out: the mirror of the types' collections (MCP's layout). */
static int xds_mirror(proto_app *a, const char *out) {
  tool_strv colls = {0};
  int rv = 0;
  for (size_t i = 0; rv == 0 && i < a->types.n; i++) {
    char c[512];
    int n = mcp_collection_for_gvk(a->types.v[i], c, sizeof c);
    if (n > 0 && (size_t)n < sizeof c)
      rv = add_copy(&colls, c, (size_t)n);
  }
  char err[300] = "";
  if (rv == 0 && tool_mirror_new(&a->mirror, out, colls.v, colls.n, err,
                                 sizeof err) != 0) {
    log_error("--out: %s", err[0] ? err : "out of memory");
    rv = -1;
  }
  for (size_t i = 0; i < colls.n; i++)
    free((char *)colls.v[i]);
  tool_strv_free(&colls);
  if (rv == 0 && a->schema)
    tool_mirror_set_schema(a->mirror, a->schema);
  return rv;
}

/* ---- the loop (main thread) ---- */

static void stop(proto_app *a) {
  if (a->stopping)
    return;
  a->stopping = 1;
  if (a->client)
    a->tp->client_del(a->client); /* no protocol callback after it */
  a->client = NULL;
  tool_tls_watch_close(a->tls_watch);
  a->tls_watch = NULL;
  uv_close((uv_handle_t *)&a->sigint, NULL);
  uv_close((uv_handle_t *)&a->sigterm, NULL);
  uv_close((uv_handle_t *)&a->synced_async, NULL);
}

static void on_signal(uv_signal_t *h, int signum) {
  proto_app *a = h->data;
  log_info("%s: stopping", signum == SIGINT ? "SIGINT" : "SIGTERM");
  stop(a);
}

static void on_synced(uv_async_t *h) {
  proto_app *a = h->data;
  log_info("synced: exiting (--exit-after-sync)");
  stop(a);
}

static void on_stream(int opened, const tool_stream_info *info, void *ud) {
  (void)ud;
  TOOL_LOG_CONTEXT(.stream = info->id, .peer = info->peer);
  if (opened)
    log_debug("stream %llu: %s call to %s", (unsigned long long)info->id,
              info->api ? info->api : "?", info->peer);
  else
    log_debug("stream %llu: %s call to %s ended: status %d%s%s",
              (unsigned long long)info->id, info->api ? info->api : "?",
              info->peer, info->status, info->details[0] ? ": " : "",
              info->details);
}

int tool_sink_proto_main(int argc, char **argv) {
  const char *connect = NULL, *transport = NULL, *level = "info", *v = NULL;
  const char *node_id = NULL, *report = NULL, *out = NULL, *api = NULL;
  int json = 0, exit_after_sync = 0, rv, status = 2;
  tool_strv auths = {0};
  mcp_dest_set **dsets = NULL; /* --api destination: the slots' sets */
  tool_sec_args sec = {0};
  tool_log_format log_format = TOOL_LOG_TEXT;
  tool_access *access = NULL;
  char why[600];
  proto_app app;
  memset(&app, 0, sizeof app);

  for (int i = 1; i < argc; i++) {
#define VALUE(name) ((rv = tool_arg_value(argc, argv, &i, name, &v)) != 0)
    if (tool_arg_flag(argv, i, "--json")) {
      json = 1;
    } else if (tool_arg_flag(argv, i, "--exit-after-sync")) {
      exit_after_sync = 1;
    } else if (VALUE("--api")) {
      api = v;
    } else if (VALUE("--destination")) {
      /* AUTHORITY..., also as a comma-separated list. */
      if (rv > 0) {
        for (const char *p = v;;) {
          size_t n = strcspn(p, ",");
          if (n && add_copy(&auths, p, n) != 0)
            goto nomem;
          if (!p[n])
            break;
          p += n + 1;
        }
        while (i + 1 < argc && argv[i + 1][0] != '-')
          if (++i, add_copy(&auths, argv[i], strlen(argv[i])) != 0)
            goto nomem;
      }
    } else if (VALUE("--connect")) {
      connect = v;
    } else if (VALUE("--transport")) {
      transport = v;
    } else if (VALUE("--node-id")) {
      node_id = v;
    } else if (tool_arg_flag(argv, i, "--delta")) {
      app.delta = 1;
    } else if (VALUE("--type")) {
      /* GROUP/VERSION/KIND..., repeatable. */
      if (rv > 0 && add_copy(&app.types, v, strlen(v)) != 0)
        goto nomem;
    } else if (VALUE("--report-status")) {
      report = v;
    } else if (VALUE("--out")) {
      if (rv > 0 && !v[0]) {
        status = usage_error("--out needs a directory");
        goto out;
      }
      out = v;
    } else if (VALUE("--log-level")) {
      level = v;
    } else if (VALUE("--log-format")) {
      if (rv > 0 && tool_log_parse_format(v, &log_format) != 0) {
        status = usage_error("--log-format: expected text or json, not %s", v);
        goto out;
      }
    } else if ((rv = tool_sec_parse_arg(argc, argv, &i, &sec)) != 0) {
      if (rv == -2)
        goto nomem;
    } else {
      char what[64];
      snprintf(what, sizeof(what), "unknown argument for --api %s",
               api ? api : "destination|dispatcher|xds");
      status = tool_unknown_arg("mcp-sink", usage, what, argv[i]);
      goto out;
    }
#undef VALUE
    if (rv < 0) {
      status = usage_error("bad arguments");
      goto out;
    }
  }
  tool_log_level lvl;
  if (tool_log_parse_level(level, &lvl) != 0) {
    status = usage_error("--log-level: expected error, warn, info or debug, "
                         "not %s", level);
    goto out;
  }
  tool_log_init("mcp-sink", lvl);
  tool_log_set_format(log_format);
  app.api = api && !strcmp(api, "destination") ? P_DEST
            : api && !strcmp(api, "xds")       ? P_XDS
                                               : P_DISP;
  if (app.api != P_XDS && (app.delta || app.types.n)) {
    status = usage_error("--delta and --type are for --api xds");
    goto out;
  }
  if (app.api == P_XDS) {
    if (auths.n || report) {
      status = usage_error("--destination and --report-status are not for "
                           "--api xds");
      goto out;
    }
    for (size_t i = 0; i < app.types.n; i++)
      if (mcp_collection_for_gvk(app.types.v[i], NULL, 0) < 0) {
        status = usage_error("--type %s: not GROUP/VERSION/KIND (e.g. "
                             "networking.istio.io/v1/VirtualService)",
                             app.types.v[i]);
        goto out;
      }
    if (!app.types.n && default_types(&app.types) != 0)
      goto nomem;
    app.node_id = node_id && node_id[0] ? node_id : "mcp-sink";
  } else if (app.api == P_DEST) {
    if (!auths.n) {
      status = usage_error("--api destination needs --destination "
                           "AUTHORITY (host[:port]), one or more");
      goto out;
    }
    if (node_id || report) {
      status = usage_error("--node-id and --report-status are for --api "
                           "dispatcher");
      goto out;
    }
    for (size_t i = 0; i < auths.n; i++)
      if (strchr(auths.v[i], '/') || !strcmp(auths.v[i], ".") ||
          !strcmp(auths.v[i], "..")) {
        status = usage_error("--destination %s: not host[:port]", auths.v[i]);
        goto out;
      }
  } else {
    if (!node_id || !node_id[0]) {
      status = usage_error("--api dispatcher needs --node-id NODE");
      goto out;
    }
    if (auths.n) {
      status = usage_error("--destination is for --api destination");
      goto out;
    }
  }
  const char *address = connect ? connect : DEFAULT_ADDRESS;
  const char *addr_why;
  if (tool_check_hostports(address, 1, &addr_why) != 0) {
    status = usage_error("--connect %s: %s", address, addr_why);
    goto out;
  }
  if (!transport) {
    transport = tool_sec_default_transport(&sec, 0);
    if (tool_transport_find(transport, &app.tp) != 0)
      transport = tool_transport_default();
  }
  rv = tool_transport_find(transport, &app.tp);
  if (rv != 0) {
    char names[64];
    status = usage_error("unknown transport %s (expected %s)", transport,
                         tool_transport_names(names, sizeof names));
    goto out;
  }
  if (!app.tp->client_new) {
    status = usage_error("--api %s: the %s transport of this build has no "
                         "clients", api, app.tp->name);
    goto out;
  }
  if (tool_sec_check(&sec, tool_transport_sec(app.tp), app.tp->name, 0,
                     address, why, sizeof why) != 0) {
    status = usage_error("%s", why);
    goto out;
  }
  status = 1;
  tool_proc_init(0); /* it dials */
  if (tool_sec_acl(&sec)) {
    rv = tool_access_new(&access, app.tp, sec.allow.v, sec.allow.n,
                         sec.deny.v, sec.deny.n, sec.access_list, why,
                         sizeof why);
    if (rv != 0) {
      log_error("%s", why);
      status = rv == 2 ? 2 : 1;
      goto out;
    }
  }
  app.json = json;
  app.exit_after_sync = exit_after_sync;
  app.out = out;
  if (out && mkdir(out, 0755) != 0 && errno != EEXIST) {
    log_error("--out %s: %s", out, strerror(errno));
    goto out_access;
  }

  const mcp_client_def *def = NULL;
  mcp_tstamp now = app.tp->now();
  if (app.api == P_DEST) {
    app.nslots = auths.n;
    app.slots = calloc(auths.n, sizeof *app.slots);
    dsets = calloc(auths.n, sizeof *dsets);
    if (!app.slots || !dsets)
      goto nomem_run;
    for (size_t i = 0; i < auths.n; i++) {
      dest_slot *s = &app.slots[i];
      s->authority = auths.v[i];
      if (mcp_dest_set_new(&s->set, NULL) < 0)
        goto nomem_run;
      dsets[i] = s->set;
      if (out) {
        size_t n = strlen(out) + strlen(s->authority) + 8;
        if (!(s->file = malloc(n)))
          goto nomem_run;
        snprintf(s->file, n, "%s/%s.json", out, s->authority);
      }
    }
    mcp_dest_agent_options o = {.authorities = (const char *const *)auths.v,
                                .sets = dsets,
                                .nauthorities = auths.n,
                                .on_update = on_dest_update,
                                .on_end = on_dest_end,
                                .user_data = &app,
                                .rand = tool_rand};
    int arv = mcp_dest_agent_new(&app.dagent, &o, now);
    if (arv == MCP_ERR_NOMEM)
      goto nomem_run;
    if (arv < 0) { /* the authorities were checked as arguments */
      log_error("destination: %s", mcp_strerror(arv));
      status = 1;
      goto out_objects;
    }
    def = mcp_dest_agent_client_def(app.dagent);
  }
  if (app.api == P_DISP) {
    mcp_disp_agent_options o;
    mcp_disp_agent_options_default(&o);
    o.node_id = node_id;
    o.on_message = on_assignments;
    o.user_data = &app;
    o.rand = tool_rand;
    {
      /* TaskStatus.timestamp: the wall clock, from the transport's clock. */
      struct timespec wall;
      if (clock_gettime(CLOCK_REALTIME, &wall) == 0)
        o.wall_offset = (int64_t)wall.tv_sec * (int64_t)MCP_SECONDS +
                        wall.tv_nsec - (int64_t)now;
    }
    if (report && (o.report_state = mcp_disp_task_state_parse(report)) < 0) {
      status = usage_error("--report-status: not a swarmkit TaskState "
                           "(NEW, PENDING, ASSIGNED, ACCEPTED, PREPARING, "
                           "READY, STARTING, RUNNING, COMPLETE, SHUTDOWN, "
                           "FAILED, REJECTED, REMOVE, ORPHANED): %s",
                           report);
      goto out_access;
    }
    if ((rv = mcp_disp_agent_new(&app.agent, &o, now)) < 0) {
      log_error("cannot create the agent: %s", mcp_strerror(rv));
      goto out_access;
    }
    mcp_schema_error err;
    if (out && (mcp_schema_new(&app.schema, NULL) < 0 ||
                tool_schema_add_swarmkit(app.schema, &err) < 0))
      goto nomem_run;
    def = mcp_disp_agent_client_def(app.agent);
  }
  mcp_client_def xdef;
  if (app.api == P_XDS) {
    mcp_redial_init(&app.xredial, NULL, tool_rand, NULL, now);
    if (mcp_xds_held_new(&app.xheld, NULL) < 0 ||
        !(app.xsynced = calloc(app.types.n, 1)))
      goto nomem_run;
    if (out) {
      mcp_schema_error err;
      if (mcp_schema_new(&app.schema, NULL) < 0 ||
          mcp_schema_add_istio(app.schema, &err) < 0)
        goto nomem_run;
      if (xds_mirror(&app, out) != 0)
        goto out_objects;
    }
    xdef = (mcp_client_def){.nslots = 1,
                            .method = xds_method,
                            .open = xds_open,
                            .ended = xds_ended,
                            .get_expiry = xds_expiry,
                            .user_data = &app};
    def = &xdef;
  }
  if (!def)
    goto out_access;

  uv_loop_init(&app.loop);
  uv_signal_init(&app.loop, &app.sigint);
  uv_signal_init(&app.loop, &app.sigterm);
  uv_async_init(&app.loop, &app.synced_async, on_synced);
  app.sigint.data = app.sigterm.data = app.synced_async.data = &app;
  uv_signal_start(&app.sigint, on_signal, SIGINT);
  uv_signal_start(&app.sigterm, on_signal, SIGTERM);
  tool_endpoint_options eo = {
      .mode = TOOL_DIAL,
      .address = address,
      .rand = tool_rand,
      .on_stream = on_stream,
      .user_data = &app,
      .tls = {sec.tls_cert, sec.tls_key, sec.tls_ca, sec.tls_server_name},
      .acl = tool_access_acl(access),
  };
  errno = 0;
  if ((rv = app.tp->client_new(&app.client, &app.loop, &eo, def)) < 0) {
    log_error("cannot dial %s: %s", address, tool_endpoint_strerror(rv, errno));
    app.client = NULL;
    stop(&app);
    uv_run(&app.loop, UV_RUN_DEFAULT);
    uv_loop_close(&app.loop);
    goto out_objects;
  }
  if (app.api == P_DEST)
    log_info("dialing conduit.proxy.destination.Destination at %s (%s) for "
             "%zu authorit%s", address, app.tp->name, auths.n,
             auths.n == 1 ? "y" : "ies");
  else if (app.api == P_XDS)
    log_info("dialing " MCP_XDS_SERVICE " (%s) at %s (%s) as node %s for %zu "
             "type%s", app.delta ? "delta" : "state of the world", address,
             app.tp->name, app.node_id, app.types.n,
             app.types.n == 1 ? "" : "s");
  else
    log_info("dialing docker.swarmkit.v1.Dispatcher at %s (%s) as node %s",
             address, app.tp->name, node_id ? node_id : "");
  if (app.tp->tls_check) {
    tool_sec_describe(&sec, 0, why, sizeof why);
    log_info("security: %s", why);
  }
  if (tool_sec_tls(&sec) &&
      tool_tls_watch_start(&app.tls_watch, app.tp, &eo.tls, &app.loop) != 0)
    log_warn("out of memory: a broken change of the TLS files will not be "
             "reported");
  uv_run(&app.loop, UV_RUN_DEFAULT);
  uv_loop_close(&app.loop);
  status = app.failed ? 1 : 0;
  log_info("stopped");
  goto out_objects;

nomem_run:
  log_error("out of memory");
  status = 1;
out_objects:
  for (size_t i = 0; app.slots && i < app.nslots; i++) {
    mcp_dest_set_del(app.slots[i].set);
    free(app.slots[i].file);
  }
  free(dsets);
  mcp_dest_agent_del(app.dagent);
  mcp_disp_agent_del(app.agent);
  mcp_xds_held_del(app.xheld);
  tool_mirror_del(app.mirror);
  free(app.xsynced);
  free(app.slots);
  mcp_schema_free(app.schema);
  vmap_free(&app.held);
out_access:
  tool_access_del(access);
  goto out;
nomem:
  fprintf(stderr, "mcp-sink: out of memory\n");
  status = 1;
out:
  for (size_t i = 0; i < auths.n; i++)
    free((char *)auths.v[i]);
  tool_strv_free(&auths);
  for (size_t i = 0; i < app.types.n; i++)
    free((char *)app.types.v[i]);
  tool_strv_free(&app.types);
  tool_sec_args_free(&sec);
  return status;
}
