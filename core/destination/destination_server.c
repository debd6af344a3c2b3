/*
 * Destination/Get, server side: one session per call, behind the stream
 * driver (mcp_stream_ops). It reads one conduit.common.Destination, then
 * either answers once (an IPv4 literal, an unknown host) or watches one
 * collection of the view store and frames Updates from mcp_watch_take():
 * the stored WeightedAddr bodies go into the messages as shared fragments,
 * never re-encoded. The rules are in mcp/destination.h.
 *
 * What a stream remembers of what its client holds is two things: whether
 * it told the client that the service exists, and how many addresses the
 * client holds (the collection's count at the last take). That is enough
 * to choose between add, remove and no_endpoints, since the watch gives
 * exactly what changed since the last take; a copy of the addresses per
 * stream would be needed only when the change log no longer reaches back,
 * and then the stream ends with RESYNC instead (see the header).
 */
#include <assert.h>

#include "destination_int.h"

struct mcp_dest_server {
  mcp_mem mem;
  const mcp_store *view;
  char *zone; /* lower case, without a trailing dot */
  size_t zone_len;
  mcp_tstamp heartbeat, debounce, max_delay;
  mcp_service_def def;
  mcp_dest_server_stats st;
};

enum {
  S_WAIT,   /* no request yet */
  S_IPV4,   /* the one add is owed */
  S_OTHER,  /* the one no_endpoints{exists:false} is owed */
  S_WATCH,  /* watching a collection */
  S_QUIET,  /* answered once, nothing more */
  S_END     /* end() says so */
};

typedef struct dsess {
  mcp_dest_server *srv;
  int state;
  int status;          /* S_END: the gRPC status and its details */
  const char *details;
  char *path;          /* the request's path ("" before it) */
  char *coll;          /* the collection watched, or NULL */
  mcp_dest_addr v4;    /* S_IPV4 */
  mcp_watch *w;
  mcp_msg_builder *b;
  uint8_t *labels;     /* WeightedAddrSet.metric_labels entries, encoded */
  size_t labels_len;
  int first_sent;      /* the first message went out */
  int sent_exists;     /* the client was last told that it exists */
  size_t sent_count;   /* addresses the client holds */
  mcp_tstamp last_sent;
  int hb_due;
  mcp_msg *pending;    /* a remove that follows the add just sent */
  /* A diff being taken: names of the live items changed (NUL-separated),
   * the bytes of their addrs fields, and the removed ones as encoded
   * AddrSet.addrs fields. */
  int collect;
  mcp_buf names;
  size_t nnames;
  size_t names_inner;
  mcp_buf removed;
  size_t nremoved;
  uint64_t bad_items;
} dsess;

static const mcp_stream_ops server_ops;

/* ---- options and server ---- */

static void server_options_default(mcp_dest_server_options *o) {
  memset(o, 0, sizeof(*o));
  o->heartbeat = MCP_DEST_DEFAULT_HEARTBEAT;
}

void mcp_dest_server_options_default_versioned(int version,
                                               mcp_dest_server_options *opts) {
  mcp_dest_server_options o;
  server_options_default(&o);
  memcpy(opts, &o,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_dest_server_options),
                           MCP_VSTRUCT_N));
}

/* A DNS name of labels [a-z0-9-_] (lower-cased here), none empty. */
static int zone_ok(char *z, size_t n) {
  if (n == 0 || n > 253 || z[0] == '.' || z[n - 1] == '.') {
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    char c = z[i];
    if (c >= 'A' && c <= 'Z') {
      z[i] = (char)(c + 32);
    } else if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 c == '-' || c == '_' || (c == '.' && z[i - 1] != '.'))) {
      return 0;
    }
  }
  return 1;
}

static int server_open(void *user_data, const mcp_peer_info *peer,
                       mcp_tstamp ts, mcp_stream **pst) {
  MCP_UNUSED(peer);
  return mcp_dest_server_open(user_data, ts, pst);
}

int mcp_dest_server_new_versioned(mcp_dest_server **psrv, int version,
                                  const mcp_dest_server_options *opts) {
  mcp_dest_server_options o;
  if (!psrv || !opts || !mcp_vstruct_known(version, MCP_VSTRUCT_N)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  server_options_default(&o);
  memcpy(&o, opts,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_dest_server_options),
                           MCP_VSTRUCT_N));
  if (!o.view) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  mcp_mem m;
  mcp_mem_init(&m, o.mem);
  const char *zone = o.dns_zone ? o.dns_zone : MCP_DEST_DEFAULT_DNS_ZONE;
  size_t zl = strlen(zone);
  if (zl && zone[zl - 1] == '.') {
    zl--;
  }
  mcp_dest_server *srv = mcp_mem_calloc(&m, 1, sizeof(*srv));
  if (!srv) {
    return MCP_ERR_NOMEM;
  }
  srv->mem = m;
  if (!(srv->zone = mcp_mem_strndup(&m, zone, zl))) {
    mcp_mem_free(&m, srv);
    return MCP_ERR_NOMEM;
  }
  if (!zone_ok(srv->zone, zl)) {
    mcp_mem_free(&m, srv->zone);
    mcp_mem_free(&m, srv);
    return MCP_ERR_INVALID_ARGUMENT;
  }
  srv->zone_len = zl;
  srv->view = o.view;
  srv->heartbeat = o.heartbeat;
  srv->debounce = o.debounce;
  srv->max_delay = o.max_delay ? o.max_delay
                               : mcp_watch_default_max_delay(o.debounce);
  srv->def.method = MCP_DEST_METHOD;
  srv->def.open = server_open;
  srv->def.user_data = srv;
  *psrv = srv;
  return 0;
}

void mcp_dest_server_del(mcp_dest_server *srv) {
  if (!srv) {
    return;
  }
  assert(srv->st.active == 0);
  mcp_mem m = srv->mem;
  mcp_mem_free(&m, srv->zone);
  mcp_mem_free(&m, srv);
}

const mcp_service_def *mcp_dest_server_service(const mcp_dest_server *srv) {
  return &srv->def;
}

void mcp_dest_server_get_stats_versioned(const mcp_dest_server *srv,
                                         int version,
                                         mcp_dest_server_stats *st) {
  memcpy(st, &srv->st,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_dest_server_stats),
                           MCP_VSTRUCT_N));
}

int mcp_dest_server_open(mcp_dest_server *srv, mcp_tstamp ts,
                         mcp_stream **pst) {
  const mcp_mem *m = &srv->mem;
  dsess *s = mcp_mem_calloc(m, 1, sizeof(*s));
  if (!s) {
    return MCP_ERR_NOMEM;
  }
  s->srv = srv;
  s->names.mem = s->removed.mem = m;
  s->state = S_WAIT;
  srv->st.active++; /* del() counts it down, also when this fails */
  if (!(s->path = mcp_mem_strdup(m, "")) ||
      mcp_msg_builder_new(&s->b, m) != 0) {
    server_ops.del(s);
    return MCP_ERR_NOMEM;
  }
  /* Frees s on error; sets *pst only on success. */
  int rv = mcp_stream_new(pst, &server_ops, s, m, ts);
  if (rv == 0) {
    srv->st.streams++;
  }
  return rv;
}

int mcp_dest_server_stream_is(const mcp_stream *st) {
  return st && mcp_stream_get_ops(st) == &server_ops;
}

const char *mcp_dest_server_stream_path(const mcp_stream *st) {
  assert(mcp_dest_server_stream_is(st));
  const dsess *s = mcp_stream_session(st);
  return s->path;
}

const char *mcp_dest_server_stream_collection(const mcp_stream *st) {
  assert(mcp_dest_server_stream_is(st));
  const dsess *s = mcp_stream_session(st);
  return s->coll;
}

/* ---- the request ---- */

static void refuse(dsess *s, const char *why) {
  s->state = S_END;
  s->status = mcp_error_grpc_status(MCP_ERR_INVALID_ARGUMENT);
  s->details = why;
  s->srv->st.invalid++;
  mcp_msg_free(s->pending);
  s->pending = NULL;
}

static int host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

/* An RFC 1123 label, copied in lower case into |out| (64 bytes): 1-63 of
 * [a-z0-9-] (either case), alphanumeric at both ends. */
static int dns_label(const char *p, size_t n, char *out) {
  if (n == 0 || n > 63 || p[0] == '-' || p[n - 1] == '-') {
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (c >= 'A' && c <= 'Z') {
      c = (char)(c + 32);
    }
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      return 0;
    }
    out[i] = c;
  }
  out[n] = '\0';
  return 1;
}

/* Builds the metric labels of the adds: {k8s_namespace, k8s_service}. */
static int make_labels(dsess *s, const char *ns, const char *svc) {
  mcp_dwr w = {NULL, 0, 0};
  mcp__dest_map_entry(&w, 2, "k8s_namespace", ns);
  mcp__dest_map_entry(&w, 2, "k8s_service", svc);
  if (!(s->labels = mcp_mem_malloc(&s->srv->mem, w.len))) {
    return MCP_ERR_NOMEM;
  }
  mcp_dwr out = {s->labels, w.len, 0};
  mcp__dest_map_entry(&out, 2, "k8s_namespace", ns);
  mcp__dest_map_entry(&out, 2, "k8s_service", svc);
  s->labels_len = out.len;
  return 0;
}

/* host is "<svc>.<ns>.svc.<zone>" (any case, trailing dot gone): starts
 * the watch of "<ns>/<svc>:<port>". 1 when it is, 0 when it is another
 * host, or NOMEM. */
static int watch_service(dsess *s, const char *host, size_t hl,
                         uint32_t port, mcp_tstamp ts) {
  const mcp_dest_server *srv = s->srv;
  size_t zl = srv->zone_len, suffix = 5 + zl; /* ".svc." zone */
  MCP_UNUSED(ts);
  if (hl <= suffix || !mcp__dest_ieq(host + hl - suffix, ".svc.", 5) ||
      !mcp__dest_ieq(host + hl - zl, srv->zone, zl)) {
    return 0;
  }
  size_t pl = hl - suffix; /* "<svc>.<ns>" */
  const char *dot = memchr(host, '.', pl);
  if (!dot) {
    return 0;
  }
  size_t sl = (size_t)(dot - host), nl = pl - sl - 1;
  char svc[64], ns[64];
  if (!dns_label(host, sl, svc) || !dns_label(dot + 1, nl, ns)) {
    return 0;
  }
  size_t cl = mcp_dest_view_collection(NULL, 0, ns, svc, port);
  const mcp_mem *m = &srv->mem;
  if (!(s->coll = mcp_mem_malloc(m, cl + 1))) {
    return MCP_ERR_NOMEM;
  }
  mcp_dest_view_collection(s->coll, cl + 1, ns, svc, port);
  mcp_watch_options wo = {srv->debounce, srv->max_delay};
  int rv = make_labels(s, ns, svc);
  if (rv == 0) {
    rv = mcp_watch_new(&s->w, srv->view, s->coll, &wo, m);
  }
  if (rv < 0) {
    mcp_mem_free(m, s->coll);
    mcp_mem_free(m, s->labels);
    s->coll = NULL;
    s->labels = NULL;
    return rv;
  }
  return 1;
}

static int handle_request(dsess *s, const uint8_t *in, size_t len,
                          mcp_tstamp ts) {
  const uint8_t *scheme = NULL, *path = NULL;
  size_t scheme_len = 0, path_len = 0;
  mcp_wire r = {in, in + len};
  mcp_wire_field fd;
  int rv;
  while ((rv = mcp_wire_field_next(&r, &fd)) == 1) {
    if (fd.num != 1 && fd.num != 2) {
      continue; /* unknown fields are skipped, as protobuf does */
    }
    if (fd.wt != MCP_WT_LEN) {
      rv = MCP_ERR_MALFORMED;
      break;
    }
    if (fd.num == 1) { /* the last one wins, as protobuf says */
      scheme = fd.data;
      scheme_len = fd.len;
    } else {
      path = fd.data;
      path_len = fd.len;
    }
  }
  if (rv < 0 || !mcp_utf8_valid(scheme, scheme_len, 0) ||
      !mcp_utf8_valid(path, path_len, 0)) {
    refuse(s, "undecodable Destination request");
    return 0;
  }
  if (scheme_len != 3 || memcmp(scheme, MCP_DEST_SCHEME, 3) != 0) {
    refuse(s, "Destination.scheme must be \"k8s\"");
    return 0;
  }
  if (path_len == 0 || path_len > MCP_DEST_MAX_PATH_LEN) {
    refuse(s, path_len ? "Destination.path is too long"
                       : "Destination.path is empty");
    return 0;
  }
  const mcp_mem *m = &s->srv->mem;
  char *p = mcp_mem_strndup(m, (const char *)path, path_len);
  if (!p) {
    return MCP_ERR_NOMEM;
  }
  mcp_mem_free(m, s->path);
  s->path = p;

  /* host[:port], or [v6][:port] */
  const char *host = p, *rest;
  size_t hl;
  int bracketed = 0;
  if (p[0] == '[') {
    const char *close = strchr(p, ']');
    if (!close) {
      refuse(s, "Destination.path: unclosed '['");
      return 0;
    }
    host = p + 1;
    hl = (size_t)(close - host);
    rest = close + 1;
    bracketed = 1;
    if (*rest && *rest != ':') {
      refuse(s, "Destination.path: malformed host");
      return 0;
    }
  } else {
    rest = strchr(p, ':');
    if (!rest) {
      rest = p + path_len;
    }
    hl = (size_t)(rest - p);
  }
  uint32_t port = MCP_DEST_DEFAULT_PORT;
  if (*rest == ':' &&
      (!mcp__dest_parse_port(rest + 1, strlen(rest + 1), &port) ||
       port == 0)) {
    refuse(s, "Destination.path: malformed port");
    return 0;
  }
  if (hl == 0) {
    refuse(s, "Destination.path: empty host");
    return 0;
  }
  uint8_t v6[16];
  if (bracketed) {
    if (!mcp__dest_parse_v6(host, hl, v6)) {
      refuse(s, "Destination.path: malformed IPv6 address");
      return 0;
    }
    s->state = S_OTHER; /* issue 14: literals other than IPv4 are "other" */
    return 0;
  }
  for (size_t i = 0; i < hl; i++) {
    if (!host_char(host[i])) {
      refuse(s, "Destination.path: malformed host");
      return 0;
    }
  }
  if (mcp__dest_parse_v4(host, hl, s->v4.ip)) {
    s->v4.family = 4;
    s->v4.port = (uint16_t)port;
    s->state = S_IPV4;
    return 0;
  }
  /* A name: one trailing dot ignored. */
  if (host[hl - 1] == '.') {
    hl--;
  }
  rv = watch_service(s, host, hl, port, ts);
  if (rv < 0) {
    return rv;
  }
  s->state = rv ? S_WATCH : S_OTHER;
  return 0;
}

static int sess_recv(void *sess, const uint8_t *in, size_t len,
                     mcp_tstamp ts) {
  dsess *s = sess;
  if (s->state == S_END) {
    return 0;
  }
  if (s->state != S_WAIT) {
    /* Get takes one request: a second is a confused client; say so
     * rather than ignore what it may think it asked for. */
    refuse(s, "Destination/Get takes one request per call");
    return 0;
  }
  return handle_request(s, in, len, ts);
}

/* ---- framing ---- */

static void count_sent(dsess *s, int kind, mcp_tstamp ts) {
  mcp_dest_server_stats *st = &s->srv->st;
  st->updates++;
  if (kind == 1) {
    st->adds++;
  } else if (kind == 2) {
    st->removes++;
  } else {
    st->no_endpoints++;
  }
  s->first_sent = 1;
  s->last_sent = ts;
  s->hb_due = 0;
}

static int no_endpoints(dsess *s, int exists, mcp_tstamp ts, mcp_msg **out) {
  static const uint8_t yes[] = {3 << 3 | MCP_WT_LEN, 2, 1 << 3, 1};
  static const uint8_t no[] = {3 << 3 | MCP_WT_LEN, 0};
  if (exists) {
    mcp_msg_builder_bytes(s->b, yes, sizeof(yes));
  } else {
    mcp_msg_builder_bytes(s->b, no, sizeof(no));
  }
  int rv = mcp_msg_builder_finish(s->b, s->coll, out);
  if (rv == 0) {
    count_sent(s, 3, ts);
  }
  return rv;
}

/* Update{add: WeightedAddrSet{addrs: ..., metric_labels}}: |inner| bytes of
 * addrs fields follow the header this writes. */
static void add_header(dsess *s, size_t inner) {
  mcp_msg_builder_key(s->b, 1, MCP_WT_LEN);
  mcp_msg_builder_varint(s->b, inner + s->labels_len);
}

static void add_item(dsess *s, const mcp_item *it) {
  mcp_msg_builder_key(s->b, 1, MCP_WT_LEN);
  mcp_msg_builder_varint(s->b, it->body_len);
  mcp_msg_builder_body(s->b, it);
}

static int finish_add(dsess *s, mcp_tstamp ts, mcp_msg **out) {
  mcp_msg_builder_bytes(s->b, s->labels, s->labels_len);
  int rv = mcp_msg_builder_finish(s->b, s->coll, out);
  if (rv == 0) {
    count_sent(s, 1, ts);
  }
  return rv;
}

/* A live item as the view contract says: a WeightedAddr body. Anything
 * else (an adapter's bug) would reach clients as an address-less entry,
 * which they refuse, so it is skipped and counted. */
static int item_ok(const mcp_item *it) {
  return it->body_len > 0 &&
         strcmp(it->type_url, MCP_DEST_WEIGHTED_ADDR_TYPE_URL) == 0;
}

typedef struct all_ctx {
  dsess *s;
  size_t inner;
} all_ctx;

static int all_size(const mcp_item *it, void *ud) {
  all_ctx *c = ud;
  if (item_ok(it)) {
    c->inner += mcp_wire_len_field_size(it->body_len);
  } else {
    c->s->srv->st.bad_items++;
  }
  return 0;
}

static int all_append(const mcp_item *it, void *ud) {
  if (item_ok(it)) {
    add_item(((all_ctx *)ud)->s, it);
  }
  return 0;
}

/* add with every address of the collection now. */
static int add_all(dsess *s, mcp_tstamp ts, mcp_msg **out) {
  all_ctx c = {s, 0};
  mcp_watch_foreach(s->w, all_size, &c);
  add_header(s, c.inner);
  mcp_watch_foreach(s->w, all_append, &c);
  return finish_add(s, ts, out);
}

/* add with the live items whose names the take collected (and sized):
 * one lookup each, for the reference to the stored body. */
static int add_changed(dsess *s, mcp_tstamp ts, mcp_msg **out) {
  mcp_item it;
  add_header(s, s->names_inner);
  const char *name = (const char *)s->names.p;
  for (size_t i = 0; i < s->nnames; i++, name += strlen(name) + 1) {
    if (mcp_watch_get(s->w, name, &it)) {
      add_item(s, &it);
    }
  }
  return finish_add(s, ts, out);
}

static int remove_msg(dsess *s, mcp_tstamp ts, mcp_msg **out) {
  mcp_msg_builder_key(s->b, 2, MCP_WT_LEN);
  mcp_msg_builder_varint(s->b, s->removed.len);
  mcp_msg_builder_bytes(s->b, s->removed.p, s->removed.len);
  int rv = mcp_msg_builder_finish(s->b, s->coll, out);
  if (rv == 0) {
    count_sent(s, 2, ts);
  }
  return rv;
}

static int collect(const mcp_item *it, void *ud) {
  dsess *s = ud;
  if (!s->collect) {
    return 0;
  }
  if (it->removed) {
    mcp_dest_addr a;
    if (mcp_dest_addr_parse(&a, it->name) != 0) {
      s->bad_items++;
      return 0;
    }
    uint8_t tcp[MCP_DEST_TCP_MAX];
    size_t n = mcp__dest_tcp_encode(&a, tcp, sizeof(tcp));
    if (mcp_buf_reserve(&s->removed, n + 2) != 0) {
      return MCP_ERR_NOMEM;
    }
    uint8_t *p = s->removed.p + s->removed.len;
    p = mcp_wire_put_len_field(p, 1, tcp, n);
    s->removed.len = (size_t)(p - s->removed.p);
    s->nremoved++;
    return 0;
  }
  if (!item_ok(it)) {
    s->bad_items++;
    return 0;
  }
  size_t n = strlen(it->name) + 1;
  if (mcp_buf_append(&s->names, it->name, n) != 0) {
    return MCP_ERR_NOMEM;
  }
  s->nnames++;
  s->names_inner += mcp_wire_len_field_size(it->body_len);
  return 0;
}

/* Takes what changed and frames it: 1 and *out (and maybe s->pending), 0
 * when the client's view is unchanged, or an error. */
static int take(dsess *s, mcp_tstamp ts, mcp_msg **out) {
  /* The addresses themselves matter only when the client holds some and
   * keeps some: otherwise the answer is an add of all or a no_endpoints. */
  s->collect = s->first_sent && s->sent_exists && s->sent_count > 0;
  s->names.len = s->removed.len = 0;
  s->nnames = s->nremoved = s->names_inner = 0;
  s->bad_items = 0;
  int full = 0;
  int rv = mcp_watch_take(s->w, ts, collect, s, &full);
  if (rv < 0) {
    return rv;
  }
  s->srv->st.bad_items += s->bad_items;
  int exists = mcp_watch_exists(s->w);
  size_t count = exists ? mcp_store_count(s->srv->view, s->coll) : 0;
  if (!exists) {
    if (s->first_sent && !s->sent_exists) {
      return 0;
    }
    rv = no_endpoints(s, 0, ts, out);
  } else if (count == 0) {
    if (s->first_sent && s->sent_exists && s->sent_count == 0) {
      return 0;
    }
    rv = no_endpoints(s, 1, ts, out);
  } else if (!s->collect) {
    rv = add_all(s, ts, out);
  } else if (full) {
    s->srv->st.resyncs++;
    return MCP_ERR_RESYNC;
  } else if (s->nnames == 0 && s->nremoved == 0) {
    return 0;
  } else if (s->nnames == 0) {
    rv = remove_msg(s, ts, out);
  } else {
    rv = add_changed(s, ts, out);
    if (rv == 0 && s->nremoved) {
      rv = remove_msg(s, ts, &s->pending);
      if (rv < 0) {
        mcp_msg_free(*out);
        *out = NULL;
      }
    }
  }
  if (rv < 0) {
    return rv; /* the watch moved on: the stream ends (NOMEM) */
  }
  s->sent_exists = exists;
  s->sent_count = count;
  return 1;
}

static int heartbeat(dsess *s, mcp_tstamp ts, mcp_msg **out) {
  int rv;
  if (s->sent_exists) {
    add_header(s, 0);
    rv = finish_add(s, ts, out);
  } else {
    rv = no_endpoints(s, 0, ts, out);
  }
  if (rv == 0) {
    s->srv->st.heartbeats++;
  }
  return rv;
}

static int sess_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  dsess *s = sess;
  int rv;
  if (s->pending) {
    *pmsg = s->pending;
    s->pending = NULL;
    return 1;
  }
  switch (s->state) {
  case S_IPV4: {
    uint8_t wa[64];
    size_t n = mcp_dest_weighted_addr_encode(&s->v4, NULL, wa, sizeof(wa));
    mcp_msg_builder_key(s->b, 1, MCP_WT_LEN);
    mcp_msg_builder_varint(s->b, mcp_wire_len_field_size(n));
    mcp_msg_builder_len_field(s->b, 1, wa, n);
    rv = mcp_msg_builder_finish(s->b, NULL, pmsg);
    if (rv == 0) {
      count_sent(s, 1, ts);
      s->state = S_QUIET;
    }
    return rv < 0 ? rv : 1;
  }
  case S_OTHER:
    rv = no_endpoints(s, 0, ts, pmsg);
    if (rv == 0) {
      s->state = S_QUIET;
    }
    return rv < 0 ? rv : 1;
  case S_WATCH:
    mcp_watch_note(s->w, ts);
    if (mcp_watch_ready(s->w, ts)) {
      rv = take(s, ts, pmsg);
      if (rv != 0) {
        return rv;
      }
    }
    if (s->srv->heartbeat && s->first_sent &&
        (s->hb_due || ts - s->last_sent >= s->srv->heartbeat)) {
      rv = heartbeat(s, ts, pmsg);
      return rv < 0 ? rv : 1;
    }
    return 0;
  default:
    return 0;
  }
}

static mcp_tstamp sess_get_expiry(const void *sess) {
  const dsess *s = sess;
  if (s->state != S_WATCH) {
    return MCP_TSTAMP_MAX;
  }
  mcp_tstamp e = mcp_watch_get_expiry(s->w);
  if (s->srv->heartbeat && s->first_sent && !s->hb_due &&
      s->last_sent + s->srv->heartbeat < e) {
    e = s->last_sent + s->srv->heartbeat;
  }
  return e;
}

static int sess_handle_expiry(void *sess, mcp_tstamp ts) {
  dsess *s = sess;
  if (s->state == S_WATCH && s->srv->heartbeat && s->first_sent &&
      ts - s->last_sent >= s->srv->heartbeat) {
    s->hb_due = 1; /* next() sends it, when the sending side is free */
  }
  /* A debounce window that ended needs nothing here: next() asks the
   * watch. */
  return 0;
}

static int sess_end(const void *sess, int *status, const char **details) {
  const dsess *s = sess;
  if (s->state != S_END) {
    return 0;
  }
  *status = s->status;
  *details = s->details;
  return 1;
}

static void sess_del(void *sess) {
  dsess *s = sess;
  const mcp_mem *m = &s->srv->mem;
  s->srv->st.active--;
  mcp_msg_free(s->pending);
  mcp_watch_del(s->w);
  mcp_msg_builder_del(s->b);
  mcp_buf_free(&s->names);
  mcp_buf_free(&s->removed);
  mcp_mem_free(m, s->labels);
  mcp_mem_free(m, s->coll);
  mcp_mem_free(m, s->path);
  mcp_mem_free(m, s);
}

static const mcp_stream_ops server_ops = {
    MCP_DEST_API_NAME,
    MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE,
    sess_recv,
    sess_next,
    sess_get_expiry,
    sess_handle_expiry,
    sess_end,
    NULL,
    sess_del,
    NULL,
    NULL,
};
