/* The table of transports. A new transport adds a row (and its file). The
 * build defines TOOLS_HAVE_<NAME> for each transport it links in. Also what
 * the shims share (shim.h) and the programs' access list (tool_access), on
 * the table's acl_* functions. */
#include "transport/transport.h"

#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "filever.h"
#include "transport/shim.h"
#include "util/log.h"

static const struct {
  const char *name;
  const tool_transport *impl; /* NULL: known, not built into this program */
} transports[] = {
#ifdef TOOLS_HAVE_GRPC
    {"grpc", &tool_transport_grpc},
#else
    {"grpc", NULL},
#endif
#ifdef TOOLS_HAVE_H2C
    {"h2", &tool_transport_h2c},
    {"h2c", &tool_transport_h2c}, /* its name before it had TLS */
#else
    {"h2", NULL},
    {"h2c", NULL},
#endif
};

#define NTRANSPORTS (sizeof(transports) / sizeof(transports[0]))

int tool_transport_find(const char *name, const tool_transport **pt) {
  for (size_t i = 0; i < NTRANSPORTS; i++) {
    if (strcmp(name, transports[i].name) == 0) {
      if (!transports[i].impl)
        return -2;
      *pt = transports[i].impl;
      return 0;
    }
  }
  return -1;
}

const char *tool_peer_format(const char *peer, char *buf, size_t len) {
  if (!len)
    return "";
  if (!peer)
    peer = "";
  int ip = strncmp(peer, "ipv4:", 5) == 0 || strncmp(peer, "ipv6:", 5) == 0;
  if (ip)
    peer += 5;
  size_t k = 0;
  for (const char *p = peer; *p && k + 1 < len; p++) {
    int hi, lo;
    if (ip && p[0] == '%' && (hi = mcp_hex_value(p[1])) >= 0 &&
        (lo = mcp_hex_value(p[2])) >= 0) {
      buf[k++] = (char)(hi << 4 | lo); /* gRPC's URI form: %5B::1%5D */
      p += 2;
    } else {
      buf[k++] = *p;
    }
  }
  buf[k] = '\0';
  return buf;
}

const char *tool_endpoint_strerror(int rv, int err) {
  if (rv == MCP_ERR_IO && err > 0)
    return uv_strerror(uv_translate_sys_error(err));
  return mcp_strerror(rv);
}

int tool_transport_sec(const tool_transport *tp) {
  if (!tp->tls_check)
    return TOOL_SEC_NO_TLS;
  return tp->cleartext_listen_loopback ? TOOL_SEC_TLS_GUARDED : TOOL_SEC_TLS;
}

const char *tool_transport_default(void) {
  for (size_t i = 0; i < NTRANSPORTS; i++) {
    if (transports[i].impl)
      return transports[i].name;
  }
  return transports[0].name; /* none built: refused when looked up */
}

/* ---- what the shims share (shim.h) ---- */

void *tool_shim_alloc(size_t size, const tool_endpoint_options *o) {
  tool_shim_cb *cb = calloc(1, size);
  if (cb) {
    cb->on_stream = o->on_stream;
    cb->on_refused = o->on_refused;
    cb->user_data = o->user_data;
  }
  return cb;
}

int tool_shim_created(void **pobj, void *obj, int rv) {
  if (rv < 0) {
    free(obj);
    return rv;
  }
  *pobj = obj;
  return 0;
}

tool_stream_info tool_shim_stream_info(const mcp_stream_info *info,
                                       char *peer, size_t len) {
  tool_stream_info ti = {
      .id = info->id,
      .peer = tool_peer_format(info->peer, peer, len),
      .dialed = info->dialed,
      .received = info->received,
      .sent = info->sent,
      .status = info->status,
      .details = info->details ? info->details : "",
      .source = mcp_stream_source_session(info->stream),
      .sink = mcp_stream_sink_session(info->stream),
      .opened = info->opened,
      .identities = info->identities,
      .nidentities = info->nidentities,
      .tls = info->tls,
      .api = info->api,
      .stream = info->stream,
  };
  return ti;
}

void tool_shim_on_stream(mcp_stream_event ev, const mcp_stream_info *info,
                         void *ud) {
  const tool_shim_cb *cb = ud;
  tool_stream_cb on_stream = ev == MCP_STREAM_REFUSED ? NULL : cb->on_stream;
  tool_refused_cb on_refused = ev == MCP_STREAM_REFUSED ? cb->on_refused : NULL;
  if (!on_stream && !on_refused)
    return;
  char peer[TOOL_PEER_MAX];
  tool_stream_info ti = tool_shim_stream_info(info, peer, sizeof(peer));
  if (on_refused)
    on_refused(&ti, cb->user_data);
  else
    on_stream(ev == MCP_STREAM_OPENED, &ti, cb->user_data);
}

void tool_shim_walk_stream(const mcp_stream_info *info, void *ud) {
  tool_shim_walk *w = ud;
  char peer[TOOL_PEER_MAX];
  tool_stream_info ti = tool_shim_stream_info(info, peer, sizeof(peer));
  w->fn(&ti, w->ud);
}

void tool_shim_stats_clear(tool_sink_stream_stats *st) { st->open = 0; }

void tool_shim_stats_stream(const mcp_stream_info *info, void *ud) {
  tool_sink_stream_stats *st = ud;
  if (mcp_stream_sink_session(info->stream))
    st->open = 1;
}

/* ---- access lists (--allow, --deny, --access-list) ---- */

/* The access list file is looked at this often. */
#define ACCESS_RELOAD_MS 1000

struct tool_access {
  const tool_transport *tp;
  void *acl;
  const char *file; /* NULL: flags only */
  void *ep;         /* the endpoint to reauthorize (NULL: not watching) */
  int sink;
  int watching; /* the handles are initialised */
  uv_timer_t timer;
  uv_signal_t sighup;
};

int tool_access_new(tool_access **pa, const tool_transport *tp,
                    const char *const *allow, size_t nallow,
                    const char *const *deny, size_t ndeny, const char *file,
                    char *err, size_t errlen) {
  if (!tp->acl_new) {
    snprintf(err, errlen, "the %s transport has no access lists", tp->name);
    return 2;
  }
  tool_access *a = calloc(1, sizeof(*a));
  if (!a || tp->acl_new(&a->acl) < 0) {
    free(a);
    snprintf(err, errlen, "out of memory");
    return 1;
  }
  a->tp = tp;
  a->file = file;
  for (size_t k = 0; k < 2; k++) {
    const char *const *v = k ? deny : allow;
    size_t n = k ? ndeny : nallow;
    for (size_t i = 0; i < n; i++) {
      int rv = tp->acl_add(a->acl, (int)k, v[i]);
      if (rv < 0) {
        int usage = rv == MCP_ERR_INVALID_ARGUMENT;
        snprintf(err, errlen, "%s %s: %s", k ? "--deny" : "--allow", v[i],
                 usage ? "not an identity pattern (no blanks or control "
                         "characters, '*' only at the end, at most 4096 "
                         "bytes)"
                       : mcp_strerror(rv));
        tool_access_del(a);
        return usage ? 2 : 1;
      }
    }
  }
  if (file) {
    char why[512];
    int rv = tp->acl_load(a->acl, file, why, sizeof(why));
    if (rv < 0) {
      snprintf(err, errlen, "--access-list %s: %s", file,
               why[0] ? why : mcp_strerror(rv));
      tool_access_del(a);
      return 1;
    }
  }
  *pa = a;
  return 0;
}

void *tool_access_acl(const tool_access *a) { return a ? a->acl : NULL; }

static void reauthorize(tool_access *a, const char *why) {
  size_t n = a->tp->acl_count ? a->tp->acl_count(a->acl) : 0;
  log_info("access list %s %s: %zu rule%s in use; checking the open "
           "streams again",
           a->file, why, n, n == 1 ? "" : "s");
  if (!a->ep)
    return;
  int rv = a->sink ? a->tp->sink_reauthorize(a->ep)
                   : a->tp->source_reauthorize(a->ep);
  if (rv < 0)
    log_error("cannot check the open streams again: %s", mcp_strerror(rv));
}

static void on_reload_timer(uv_timer_t *t) {
  tool_access *a = t->data;
  char err[512];
  int rv = a->tp->acl_reload(a->acl, err, sizeof(err));
  if (rv > 0)
    reauthorize(a, "changed");
  else if (rv < 0) /* once per broken version */
    log_error("access list %s: %s; keeping the rules in use", a->file,
              err[0] ? err : mcp_strerror(rv));
}

static void on_sighup(uv_signal_t *h, int signum) {
  (void)signum;
  tool_access *a = h->data;
  char err[512];
  int rv = a->tp->acl_load(a->acl, a->file, err, sizeof(err));
  if (rv < 0)
    log_error("SIGHUP: access list %s: %s; keeping the rules in use",
              a->file, err[0] ? err : mcp_strerror(rv));
  else
    reauthorize(a, "read again (SIGHUP)");
}

void tool_access_watch(tool_access *a, uv_loop_t *loop, void *ep, int sink) {
  if (!a || !a->file || a->watching)
    return;
  a->ep = ep;
  a->sink = sink;
  uv_timer_init(loop, &a->timer);
  uv_signal_init(loop, &a->sighup);
  a->timer.data = a->sighup.data = a;
  a->watching = 1;
  uv_timer_start(&a->timer, on_reload_timer, ACCESS_RELOAD_MS,
                 ACCESS_RELOAD_MS);
  uv_signal_start(&a->sighup, on_sighup, SIGHUP);
}

void tool_access_close(tool_access *a) {
  if (!a)
    return;
  a->ep = NULL;
  if (a->watching) {
    a->watching = 0;
    uv_close((uv_handle_t *)&a->timer, NULL);
    uv_close((uv_handle_t *)&a->sighup, NULL);
  }
}

void tool_access_del(tool_access *a) {
  if (!a)
    return;
  if (a->acl)
    a->tp->acl_del(a->acl);
  free(a);
}

/* ---- TLS files ---- */

struct tool_tls_watch {
  const tool_transport *tp;
  tool_tls_options tls;
  mcp_filever sig[3];
  int broken; /* the files as last seen cannot be used */
  uv_timer_t timer;
};

#define TLS_WATCH_MS 1000

/* Notes the files' signatures; 1 when one differs from the last seen. */
static int tls_files_changed(tool_tls_watch *w) {
  const char *f[3] = {w->tls.cert_file, w->tls.key_file, w->tls.ca_file};
  int changed = 0;
  for (int i = 0; i < 3; i++) {
    mcp_filever v;
    if (!f[i])
      continue;
    (void)mcp_filever_stat(f[i], &v); /* gone: a version too */
    changed |= !mcp_filever_eq(&v, &w->sig[i]);
    w->sig[i] = v;
  }
  return changed;
}

static void on_tls_timer(uv_timer_t *t) {
  tool_tls_watch *w = t->data;
  if (!tls_files_changed(w))
    return;
  char why[512] = "";
  int rv = w->tp->tls_check(&w->tls, why, sizeof(why));
  if (rv < 0) {
    log_error("TLS files changed and cannot be used: %s; the certificate "
              "in use stays",
              why[0] ? why : mcp_strerror(rv));
    w->broken = 1;
  } else {
    log_info("TLS files changed%s: new connections use them",
             w->broken ? " and are usable again" : "");
    w->broken = 0;
  }
}

int tool_tls_watch_start(tool_tls_watch **pw, const tool_transport *tp,
                         const tool_tls_options *tls, uv_loop_t *loop) {
  *pw = NULL;
  if (!tp->tls_check)
    return 0;
  tool_tls_watch *w = calloc(1, sizeof(*w));
  if (!w)
    return 1;
  w->tp = tp;
  w->tls = *tls;
  tls_files_changed(w); /* the files as the endpoint read them */
  uv_timer_init(loop, &w->timer);
  w->timer.data = w;
  uv_timer_start(&w->timer, on_tls_timer, TLS_WATCH_MS, TLS_WATCH_MS);
  *pw = w;
  return 0;
}

static void tls_watch_closed(uv_handle_t *h) { free(h->data); }

void tool_tls_watch_close(tool_tls_watch *w) {
  if (w)
    uv_close((uv_handle_t *)&w->timer, tls_watch_closed);
}
