/*
 * The nghttp2 transport (transport-h2c) behind the tools' transport table,
 * as "h2" (TLS with the --tls-* flags, cleartext h2c without) and "h2c"
 * (the same; its name before it had TLS).
 *
 * The h2c objects run on the program's libuv loop: no thread of their own.
 * Every function of the table, every core callback and on_stream run on
 * the main thread, so the store is changed in place (then notified) and
 * the sink's streams are read directly. Deleting an object starts its
 * shutdown; the program's loop then runs until the sockets are closed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <mcp/auth.h>
#include <mcp/h2c.h>

#include "transport/shim.h"
#include "transport/transport.h"
#include "util/log.h"

typedef struct h2c_ep {
  tool_shim_cb cb;  /* first: tool_shim_alloc() */
  mcp_store *store; /* source: the store the streams serve */
  mcp_h2c_source *src;
  mcp_h2c_sink *sink;
  mcp_sink_state *state; /* sink: the state its streams share */
  ops_http_fn http;      /* plain HTTP requests on our port (tools/ops) */
  void *http_user_data;
  mcp_h2c_client *client; /* client_new() */
} h2c_ep;

/* The debug endpoints answer HTTP/1.1 requests on the listening port. */
static int http_fn(const char *method, const char *path,
                   mcp_h2c_http_response *resp, void *ud) {
  h2c_ep *ep = ud;
  if (!ep->http)
    return 0;
  ops_http_reply r;
  ops_http_reply_init(&r);
  ep->http(method, path, &r, ep->http_user_data);
  if (r.body.failed) {
    mcp_h2c_http_respond(resp, 500, NULL);
  } else {
    mcp_h2c_http_respond(resp, r.status, r.content_type);
    if (r.body.len && mcp_h2c_http_append(resp, r.body.p, r.body.len) < 0)
      mcp_h2c_http_respond(resp, 500, NULL);
  }
  ops_http_reply_free(&r);
  return 1;
}

/* ---- access lists: the core's rules, the file read again when its
 * bytes change (everything runs on the main thread: no lock) ---- */

#define ACL_MAX_FILE (1 << 20)

typedef struct h2c_acl {
  mcp_acl *rules;
  char *path;   /* the file of the last load, or NULL */
  char *seen;   /* its content last read (NULL: missing), reported once */
  size_t seen_len;
} h2c_acl;

/* The whole of |path| (at most 1 MiB and one byte: parse says "larger"). */
static int read_all(const char *path, char **out, size_t *len, char *err,
                    size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return MCP_ERR_IO;
  }
  char *buf = malloc(ACL_MAX_FILE + 1);
  if (!buf) {
    fclose(f);
    return MCP_ERR_NOMEM;
  }
  *len = fread(buf, 1, ACL_MAX_FILE + 1, f);
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    snprintf(err, errlen, "cannot read %s", path);
    free(buf);
    return MCP_ERR_IO;
  }
  *out = buf;
  return 0;
}

static int acl_new(void **pacl) {
  h2c_acl *a = calloc(1, sizeof(*a));
  if (!a)
    return MCP_ERR_NOMEM;
  int rv = mcp_acl_new(&a->rules, NULL);
  if (rv < 0) {
    free(a);
    return rv;
  }
  *pacl = a;
  return 0;
}

static int acl_add(void *p, int deny, const char *pattern) {
  return mcp_acl_add(((h2c_acl *)p)->rules, deny ? MCP_ACL_DENY : MCP_ACL_ALLOW,
                     pattern);
}

/* Reads |path|, remembers what was read, and parses it: 1 when the rules
 * were replaced, 0 when the content is the one last read (|changed_only|),
 * negative with |err| set. */
static int acl_read(h2c_acl *a, const char *path, int changed_only, char *err,
                    size_t errlen) {
  err[0] = '\0';
  char *text = NULL;
  size_t len = 0;
  int rv = read_all(path, &text, &len, err, errlen);
  if (changed_only && (rv < 0 ? !a->seen
                              : a->seen && len == a->seen_len &&
                                    memcmp(text, a->seen, len) == 0)) {
    free(text);
    return 0; /* unchanged, or still missing (reported once) */
  }
  free(a->seen);
  a->seen = text; /* this version is reported once, good or bad */
  a->seen_len = len;
  if (rv < 0)
    return rv;
  rv = mcp_acl_parse(a->rules, text, len, err, errlen);
  return rv < 0 ? rv : 1;
}

static int acl_load(void *p, const char *path, char *err, size_t errlen) {
  h2c_acl *a = p;
  char *copy = strdup(path);
  if (!copy)
    return MCP_ERR_NOMEM;
  int rv = acl_read(a, path, 0, err, errlen);
  if (rv < 0) {
    free(copy);
    return rv;
  }
  free(a->path);
  a->path = copy;
  return 0;
}

static int acl_reload(void *p, char *err, size_t errlen) {
  h2c_acl *a = p;
  if (!a->path)
    return MCP_ERR_NOT_FOUND;
  return acl_read(a, a->path, 1, err, errlen);
}

static size_t acl_count(void *p) { return mcp_acl_count(((h2c_acl *)p)->rules); }

static void acl_del(void *p) {
  h2c_acl *a = p;
  if (!a)
    return;
  mcp_acl_del(a->rules);
  free(a->path);
  free(a->seen);
  free(a);
}

/* Checks the files as a dialer would (the programs checked which files a
 * listener needs). */
static int tls_check(const tool_tls_options *t, char *err, size_t errlen) {
  mcp_h2c_tls_options h = {t->cert_file, t->key_file, t->ca_file,
                           t->server_name};
  return mcp_h2c_tls_check(&h, 0, err, errlen);
}

/* The listener out of descriptors (or memory): said once per pause, as
 * a warning naming the limit, and once when it accepts again. */
static void on_listener(mcp_h2c_listener_event ev, int err, void *ud) {
  (void)ud;
  if (ev == MCP_H2C_LISTENER_RESUMED) {
    log_info("accepting connections again");
    return;
  }
  if (err == EMFILE || err == ENFILE) {
    struct rlimit rl;
    char lim[64] = "";
    if (err == EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0)
      snprintf(lim, sizeof(lim), " (limit %llu)",
               (unsigned long long)rl.rlim_cur);
    log_warn("out of file descriptors%s: new connections wait until "
             "streams end (raise the hard limit, ulimit -Hn)", lim);
  } else {
    log_warn("cannot accept connections: %s; trying again", strerror(err));
  }
}

static void fill_opts(mcp_h2c_options *ho, const tool_endpoint_options *o,
                      h2c_ep *ep) {
  mcp_h2c_options_default(ho);
  TOOL_SHIM_OPTIONS(ho, o, MCP_H2C_DIAL, MCP_H2C_LISTEN);
  ho->on_stream = tool_shim_on_stream;
  ho->on_listener = on_listener;
  ho->user_data = ep;
  if (o->max_streams_per_connection > 0)
    ho->max_streams_per_connection = o->max_streams_per_connection;
  if (o->peer_stream_rate)
    ho->peer_stream_rate = o->peer_stream_rate;
  if (o->peer_stream_burst)
    ho->peer_stream_burst = o->peer_stream_burst;
  if (o->max_handshakes_per_peer > 0)
    ho->max_handshakes_per_peer = o->max_handshakes_per_peer;
  /* TLS when any file is set (the programs ran tls_check() first); the
   * access list decides on the peer's verified identities. */
  ho->tls.cert_file = o->tls.cert_file;
  ho->tls.key_file = o->tls.key_file;
  ho->tls.ca_file = o->tls.ca_file;
  ho->tls.server_name = o->tls.server_name;
  if (o->acl) {
    ho->authorize = mcp_acl_authorize;
    ho->authorize_user_data = ((h2c_acl *)o->acl)->rules;
  }
  if (o->mode == TOOL_LISTEN && o->http) {
    ep->http = o->http;
    ep->http_user_data = o->http_user_data;
    ho->http_handler = http_fn;
  }
  /* No on_closed: the endpoint is freed right after *_del(), after which
   * the library calls nothing else. */
}

static int source_new(void **pep, uv_loop_t *loop,
                      const tool_endpoint_options *o,
                      const mcp_source_options *so) {
  h2c_ep *ep = tool_shim_alloc(sizeof(*ep), o);
  if (!ep)
    return MCP_ERR_NOMEM;
  mcp_h2c_options ho;
  fill_opts(&ho, o, ep);
  ep->store = so->store;
  return tool_shim_created(pep, ep,
                           mcp_h2c_source_new(&ep->src, loop, &ho, so));
}

static int source_port(void *ep) {
  return mcp_h2c_source_port(((h2c_ep *)ep)->src);
}

/* The store lives on this (the loop's) thread: change it in place, then
 * let every stream push what it may on the next loop iteration. */
static int source_apply(void *p, tool_store_fn fn, void *ud) {
  h2c_ep *ep = p;
  fn(ep->store, mcp_h2c_now(), ud);
  mcp_h2c_source_notify(ep->src);
  return 0;
}

/* The sessions are freed at once; the loop closes the connections. */
static void source_del(void *p) {
  h2c_ep *ep = p;
  if (ep) {
    mcp_h2c_source_del(ep->src);
    free(ep);
  }
}

static int sink_new(void **pep, uv_loop_t *loop,
                    const tool_endpoint_options *o, mcp_sink_state *state) {
  h2c_ep *ep = tool_shim_alloc(sizeof(*ep), o);
  if (!ep)
    return MCP_ERR_NOMEM;
  mcp_h2c_options ho;
  fill_opts(&ho, o, ep);
  ep->state = state;
  return tool_shim_created(pep, ep,
                           mcp_h2c_sink_new(&ep->sink, loop, &ho, state));
}

static int sink_port(void *ep) {
  return mcp_h2c_sink_port(((h2c_ep *)ep)->sink);
}

/* An answer still being framed (sending) is not sent yet either. */
static int sink_finish(void *ep) {
  return mcp_h2c_sink_finish(((h2c_ep *)ep)->sink);
}

static int sink_stats(void *ep, tool_sink_stream_stats *st) {
  tool_shim_stats_clear(st);
  int rv = mcp_h2c_sink_streams(((h2c_ep *)ep)->sink, tool_shim_stats_stream, st);
  return rv < 0 ? rv : 0; /* the count is not asked for */
}

/* Introspection (tools/ops): everything lives on this thread. */

static int source_streams(void *ep, tool_stream_fn fn, void *ud) {
  tool_shim_walk w = {fn, ud};
  return mcp_h2c_source_streams(((h2c_ep *)ep)->src, tool_shim_walk_stream, &w);
}

static int sink_streams(void *ep, tool_stream_fn fn, void *ud) {
  tool_shim_walk w = {fn, ud};
  return mcp_h2c_sink_streams(((h2c_ep *)ep)->sink, tool_shim_walk_stream, &w);
}

/* mcp_h2c_stats is the engine's mcp_transport_stats. */
static int stats(void *p, mcp_transport_stats *st) {
  h2c_ep *ep = p;
  return ep->src ? mcp_h2c_source_stats(ep->src, st)
                 : mcp_h2c_sink_stats(ep->sink, st);
}

/* mcp_h2c_sink_call() is for other threads: here the state is ours. */
static int sink_call(void *p, tool_state_fn fn, void *ud) {
  fn(((h2c_ep *)p)->state, mcp_h2c_now(), ud);
  return 0;
}

static int source_reauthorize(void *ep) {
  return mcp_h2c_source_reauthorize(((h2c_ep *)ep)->src);
}

static int sink_reauthorize(void *ep) {
  return mcp_h2c_sink_reauthorize(((h2c_ep *)ep)->sink);
}

static void sink_del(void *p) {
  h2c_ep *ep = p;
  if (ep) {
    mcp_h2c_sink_del(ep->sink);
    free(ep);
  }
}

/* ---- clients (mcp_client_def), on the loop ---- */

static int client_new(void **pc, uv_loop_t *loop,
                      const tool_endpoint_options *o,
                      const mcp_client_def *def) {
  h2c_ep *ep = tool_shim_alloc(sizeof(*ep), o);
  if (!ep)
    return MCP_ERR_NOMEM;
  tool_endpoint_options d = *o;
  d.mode = TOOL_DIAL;
  d.http = NULL;
  mcp_h2c_options ho;
  fill_opts(&ho, &d, ep);
  return tool_shim_created(pc, ep,
                           mcp_h2c_client_new(&ep->client, loop, &ho, def));
}

/* The protocol lives on this thread: run |fn| now, then have the calls
 * pumped and open() asked on the next loop iteration. */
static int client_run(void *p, tool_run_fn fn, void *ud) {
  h2c_ep *ep = p;
  fn(mcp_h2c_now(), ud);
  mcp_h2c_client_notify(ep->client);
  return 0;
}

static void client_del(void *p) {
  h2c_ep *ep = p;
  if (ep) {
    mcp_h2c_client_del(ep->client);
    free(ep);
  }
}

const tool_transport tool_transport_h2c = {
    .name = "h2",
    .now = mcp_h2c_now,
    TOOL_SHIM_ENDPOINT_ROWS,
    TOOL_SHIM_SECURITY_ROWS,
    .services = 1,
    .cleartext_listen_loopback = 1,
    TOOL_SHIM_CLIENT_ROWS,
};
