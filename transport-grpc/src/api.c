/* The public objects: a source or a sink around one transport loop. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "internal.h"

struct mcp_grpc_source {
  mcp_grpc_ep ep;
};

struct mcp_grpc_sink {
  mcp_grpc_ep ep;
};

struct mcp_grpc_client {
  mcp_grpc_ep ep;
};

static void ep_free_copies(mcp_grpc_ep *ep) {
  mcp_grpc_tls_del(ep->tls);
  ep->tls = NULL;
  mcp_grpc_free(&ep->mem, ep->address);
  ep->address = NULL;
  mcp_grpc_free(&ep->mem, (char *)ep->opts.tls.server_name);
  ep->opts.tls.server_name = NULL;
  mcp_grpc_free(&ep->mem, ep->services);
  ep->services = NULL;
  if (ep->side) { /* a dialing side's slots (ep_init); a client's are its */
    mcp_grpc_free(&ep->mem, ep->slots);
    ep->slots = NULL;
  }
  mcp_side_del(ep->side);
  ep->side = NULL;
}

/* Copies opts.services and their method strings into one block. */
static int copy_services(mcp_grpc_ep *ep) {
  size_t n = ep->opts.nservices, bytes = n * sizeof(mcp_service_def);
  if (n == 0) {
    ep->opts.services = NULL;
    return 0;
  }
  for (size_t i = 0; i < n; i++)
    bytes += strlen(ep->opts.services[i].method) + 1;
  mcp_service_def *v = mcp_grpc_malloc(&ep->mem, bytes);
  if (!v)
    return MCP_ERR_NOMEM;
  char *q = (char *)(v + n);
  for (size_t i = 0; i < n; i++) {
    v[i] = ep->opts.services[i];
    size_t len = strlen(v[i].method) + 1;
    memcpy(q, v[i].method, len);
    v[i].method = q;
    q += len;
  }
  ep->services = v;
  ep->opts.services = v;
  return 0;
}

/* |ep->mem| is set. */
static int ep_init(mcp_grpc_ep *ep, const mcp_grpc_options *opts,
                   mcp_grpc_role role) {
  ep->role = role;
  ep->opts = *opts;
  ep->opts.mem = NULL; /* |ep->mem| is the copy */
  mcp_grpc_options_normalize(&ep->opts);
  /* The file paths are copied by the TLS object; the name is kept. */
  memset(&ep->opts.tls, 0, sizeof(ep->opts.tls));
  ep->address = mcp_grpc_strdup(&ep->mem, opts->address);
  if (!ep->address)
    return MCP_ERR_NOMEM;
  ep->opts.address = ep->address;
  int rv = copy_services(ep);
  /* MCP's defs, from the core: a source's from its session options, a
   * sink's from its state (a listening sink must be RESOURCE). */
  if (rv == 0 && role == MCP_GRPC_ROLE_SOURCE && !opts->no_mcp)
    rv = mcp_side_source_new(&ep->side, &ep->source_opts, &ep->mem);
  else if (rv == 0 && role == MCP_GRPC_ROLE_SINK && !opts->no_mcp)
    rv = mcp_side_sink_new(&ep->side, ep->state,
                           opts->mode == MCP_GRPC_DIAL, &ep->mem);
  if (rv == 0 && ep->side && opts->mode == MCP_GRPC_DIAL) {
    /* Dialing: the side's client def, run as any protocol's. */
    ep->client_def = *mcp_side_client(ep->side);
    ep->slots = mcp_grpc_calloc(&ep->mem, ep->client_def.nslots,
                                sizeof(*ep->slots));
    if (!ep->slots)
      rv = MCP_ERR_NOMEM;
  }
  if (rv == 0 && opts->tls.server_name &&
      !(ep->opts.tls.server_name =
            mcp_grpc_strdup(&ep->mem, opts->tls.server_name)))
    rv = MCP_ERR_NOMEM;
  if (rv == 0 && mcp_grpc_tls_wanted(&opts->tls))
    rv = mcp_grpc_tls_new(&ep->tls, &opts->tls,
                          opts->mode == MCP_GRPC_LISTEN, &ep->mem);
  if (rv < 0) {
    ep_free_copies(ep);
    return rv;
  }
  /* gRPC 1.51 may end its clean-up on a detached thread after our last
   * grpc_shutdown() (when one of its own objects held the last ref).
   * OpenSSL's clean-up at exit then frees what that thread is still
   * freeing: a double free at exit, seen by ASan in CI. Without that
   * clean-up, the system takes the memory back, as it does for the rest.
   * Effective where OpenSSL is not yet initialised: a no-op after. */
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
  grpc_init();
  rv = mcp_grpc_ep_start(ep);
  if (rv < 0) {
    grpc_shutdown();
    ep_free_copies(ep);
    if (ep->listen_errno) /* after the clean-up, which may change errno */
      errno = ep->listen_errno;
  }
  return rv;
}

static void ep_fini(mcp_grpc_ep *ep) {
  mcp_grpc_ep_stop(ep);
  /* The server and channels are destroyed: gRPC calls the TLS object's
   * certificate fetcher no more. */
  ep_free_copies(ep);
  grpc_shutdown(); /* after every gRPC object of ours is gone */
}

/* The services of a listening |opts|: each at a method path of its own,
 * with an open(); none at an MCP method the object serves. */
static int valid_services(const mcp_grpc_options *opts, mcp_grpc_role role) {
  if (opts->nservices == 0)
    return 1;
  if (opts->mode != MCP_GRPC_LISTEN)
    return 0;
  /* The MCP methods this object serves are its own. */
  const char *mcp[4];
  size_t nmcp = opts->no_mcp ? 0
                             : mcp_service_methods(role == MCP_GRPC_ROLE_SOURCE
                                                       ? MCP_METHODS_OF_SOURCE
                                                       : MCP_METHODS_OF_SINK,
                                                   mcp);
  return mcp_service_defs_check(opts->services, opts->nservices, mcp, nmcp) == 0;
}

static int valid(const mcp_grpc_options *opts) {
  return opts && opts->address && opts->address[0] &&
         (opts->mode == MCP_GRPC_DIAL ||
          (opts->mode == MCP_GRPC_LISTEN && !strchr(opts->address, ','))) &&
         strlen(opts->address) < 4096 &&
         /* TLS from files, or the application's credentials: not both */
         !(mcp_grpc_tls_wanted(&opts->tls) &&
           (opts->server_credentials || opts->channel_credentials));
}

/* *_streams(): the user's function, run through a counter. */
typedef struct stream_count {
  mcp_grpc_stream_fn fn;
  void *user_data;
  int n;
} stream_count;

static void count_stream(const mcp_grpc_stream_info *info, void *ud) {
  stream_count *c = ud;
  c->n++;
  if (c->fn)
    c->fn(info, c->user_data);
}

static int streams(mcp_grpc_ep *ep, mcp_grpc_stream_fn fn, void *user_data) {
  stream_count c = {fn, user_data, 0};
  mcp_grpc_job job = {.kind = MCP_GRPC_JOB_STREAMS, .stream_fn = count_stream,
                      .user_data = &c, .q.sync = 1};
  int rv = mcp_grpc_ep_submit(ep, &job);
  return rv < 0 ? rv : c.n;
}

static int stats(mcp_grpc_ep *ep, int version, mcp_grpc_stats *st) {
  if (!st || version < 1)
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_grpc_stats full;
  memset(&full, 0, sizeof(full));
  mcp_grpc_job job = {.kind = MCP_GRPC_JOB_STATS, .user_data = &full,
                      .q.sync = 1};
  int rv = mcp_grpc_ep_submit(ep, &job);
  return rv < 0 ? rv : mcp_transport_stats_write(st, version, &full);
}

/* Reads the caller's options into |o| and makes the object's allocator:
 * the object is allocated with it. */
static int read_options(mcp_grpc_options *o, mcp_mem *mem, int version,
                        const mcp_grpc_options *opts) {
  int rv = mcp_grpc_options_read(o, version, opts);
  if (rv == 0)
    mcp_grpc_mem_init(mem, o->mem);
  return rv;
}

int mcp_grpc_source_new_versioned(mcp_grpc_source **psrc, int version,
                                  const mcp_grpc_options *caller_opts,
                                  const mcp_source_options *session_opts) {
  mcp_grpc_options o;
  mcp_mem mem;
  if (!psrc || read_options(&o, &mem, version, caller_opts) < 0)
    return MCP_ERR_INVALID_ARGUMENT;
  const mcp_grpc_options *opts = &o;
  if (!valid(opts) || !valid_services(opts, MCP_GRPC_ROLE_SOURCE) ||
      (opts->no_mcp && opts->mode != MCP_GRPC_LISTEN))
    return MCP_ERR_INVALID_ARGUMENT;
  /* Without the MCP methods, no session is ever made: no store needed. */
  if (!opts->no_mcp && (!session_opts || (!session_opts->store &&
                                          !session_opts->select_store)))
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_grpc_source *src = mcp_grpc_calloc(&mem, 1, sizeof(*src));
  if (!src)
    return MCP_ERR_NOMEM;
  src->ep.mem = mem;
  if (session_opts)
    src->ep.source_opts = *session_opts;
  int rv = ep_init(&src->ep, opts, MCP_GRPC_ROLE_SOURCE);
  if (rv < 0) {
    mcp_grpc_free(&mem, src);
    return rv;
  }
  *psrc = src;
  return 0;
}

void mcp_grpc_source_del(mcp_grpc_source *src) {
  if (!src)
    return;
  mcp_mem mem = src->ep.mem;
  ep_fini(&src->ep);
  mcp_grpc_free(&mem, src);
}

/* gRPC core answers 1 for a unix socket it binds: a unix socket has no
 * port, so 0, as the header says (and as h2c). */
static int ep_port(const mcp_grpc_ep *ep) {
  return ep->address && strncmp(ep->address, "unix", 4) == 0 ? 0 : ep->port;
}

int mcp_grpc_source_port(const mcp_grpc_source *src) {
  return ep_port(&src->ep);
}

int mcp_grpc_source_update(mcp_grpc_source *src, mcp_grpc_store_fn fn,
                           void *user_data) {
  if (!fn)
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_grpc_job job = {.kind = MCP_GRPC_JOB_STORE, .store_fn = fn,
                      .user_data = user_data};
  return mcp_grpc_ep_submit(&src->ep, &job);
}

int mcp_grpc_source_call(mcp_grpc_source *src, mcp_grpc_store_fn fn,
                         void *user_data) {
  if (!fn)
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_grpc_job job = {.kind = MCP_GRPC_JOB_STORE, .store_fn = fn,
                      .user_data = user_data, .q.sync = 1};
  return mcp_grpc_ep_submit(&src->ep, &job);
}

int mcp_grpc_source_streams(mcp_grpc_source *src, mcp_grpc_stream_fn fn,
                            void *user_data) {
  return streams(&src->ep, fn, user_data);
}

int mcp_grpc_source_stats_versioned(mcp_grpc_source *src, int version,
                                    mcp_grpc_stats *st) {
  return stats(&src->ep, version, st);
}

int mcp_grpc_source_reauthorize(mcp_grpc_source *src) {
  mcp_grpc_job job = {.kind = MCP_GRPC_JOB_REAUTHORIZE};
  return mcp_grpc_ep_submit(&src->ep, &job);
}

int mcp_grpc_sink_new_versioned(mcp_grpc_sink **psink, int version,
                                const mcp_grpc_options *caller_opts,
                                mcp_sink_state *state) {
  mcp_grpc_options o;
  mcp_mem mem;
  if (!psink || read_options(&o, &mem, version, caller_opts) < 0)
    return MCP_ERR_INVALID_ARGUMENT;
  const mcp_grpc_options *opts = &o;
  /* no_mcp: a listening sink serving its services alone, with no state
   * (as h2c's). */
  if (!valid(opts) || (!state && !opts->no_mcp) ||
      !valid_services(opts, MCP_GRPC_ROLE_SINK) ||
      (opts->no_mcp && opts->mode != MCP_GRPC_LISTEN))
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_grpc_sink *sink = mcp_grpc_calloc(&mem, 1, sizeof(*sink));
  if (!sink)
    return MCP_ERR_NOMEM;
  sink->ep.mem = mem;
  sink->ep.state = state;
  int rv = ep_init(&sink->ep, opts, MCP_GRPC_ROLE_SINK);
  if (rv < 0) {
    mcp_grpc_free(&mem, sink);
    return rv;
  }
  *psink = sink;
  return 0;
}

void mcp_grpc_sink_del(mcp_grpc_sink *sink) {
  if (!sink)
    return;
  mcp_mem mem = sink->ep.mem;
  ep_fini(&sink->ep);
  mcp_grpc_free(&mem, sink);
}

int mcp_grpc_sink_port(const mcp_grpc_sink *sink) { return ep_port(&sink->ep); }

int mcp_grpc_sink_call(mcp_grpc_sink *sink, mcp_grpc_state_fn fn,
                       void *user_data) {
  if (!fn)
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_grpc_job job = {.kind = MCP_GRPC_JOB_STATE, .state_fn = fn,
                      .user_data = user_data, .q.sync = 1};
  return mcp_grpc_ep_submit(&sink->ep, &job);
}

int mcp_grpc_sink_streams(mcp_grpc_sink *sink, mcp_grpc_stream_fn fn,
                          void *user_data) {
  return streams(&sink->ep, fn, user_data);
}

int mcp_grpc_sink_stats_versioned(mcp_grpc_sink *sink, int version,
                                  mcp_grpc_stats *st) {
  return stats(&sink->ep, version, st);
}

int mcp_grpc_sink_finish(mcp_grpc_sink *sink) {
  mcp_grpc_job job = {.kind = MCP_GRPC_JOB_FINISH};
  return mcp_grpc_ep_submit(&sink->ep, &job);
}

int mcp_grpc_sink_reauthorize(mcp_grpc_sink *sink) {
  mcp_grpc_job job = {.kind = MCP_GRPC_JOB_REAUTHORIZE};
  return mcp_grpc_ep_submit(&sink->ep, &job);
}

int mcp_grpc_client_new_versioned(mcp_grpc_client **pc, int version,
                                  const mcp_grpc_options *caller_opts,
                                  const mcp_client_def *def) {
  mcp_grpc_options o;
  mcp_mem mem;
  if (!pc || read_options(&o, &mem, version, caller_opts) < 0)
    return MCP_ERR_INVALID_ARGUMENT;
  const mcp_grpc_options *opts = &o;
  if (!valid(opts) || opts->mode != MCP_GRPC_DIAL || opts->nservices ||
      opts->no_mcp || !def || def->nslots == 0 ||
      def->nslots > MCP_GRPC_CLIENT_MAX_SLOTS || !def->method || !def->open ||
      !def->ended)
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_grpc_client *c = mcp_grpc_calloc(&mem, 1, sizeof(*c));
  if (!c)
    return MCP_ERR_NOMEM;
  c->ep.mem = mem;
  c->ep.client_def = *def;
  c->ep.slots = mcp_grpc_calloc(&mem, def->nslots, sizeof(*c->ep.slots));
  if (!c->ep.slots) {
    mcp_grpc_free(&mem, c);
    return MCP_ERR_NOMEM;
  }
  int rv = ep_init(&c->ep, opts, MCP_GRPC_ROLE_CLIENT);
  if (rv < 0) {
    mcp_grpc_free(&mem, c->ep.slots);
    mcp_grpc_free(&mem, c);
    return rv;
  }
  *pc = c;
  return 0;
}

void mcp_grpc_client_del(mcp_grpc_client *c) {
  if (!c)
    return;
  mcp_mem mem = c->ep.mem;
  ep_fini(&c->ep);
  mcp_grpc_free(&mem, c->ep.slots);
  mcp_grpc_free(&mem, c);
}

int mcp_grpc_client_update(mcp_grpc_client *c, mcp_grpc_run_fn fn,
                           void *user_data) {
  if (!fn)
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_grpc_job job = {.kind = MCP_GRPC_JOB_RUN, .run_fn = fn,
                      .user_data = user_data};
  return mcp_grpc_ep_submit(&c->ep, &job);
}

int mcp_grpc_client_call(mcp_grpc_client *c, mcp_grpc_run_fn fn,
                         void *user_data) {
  if (!fn)
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_grpc_job job = {.kind = MCP_GRPC_JOB_RUN, .run_fn = fn,
                      .user_data = user_data, .q.sync = 1};
  return mcp_grpc_ep_submit(&c->ep, &job);
}

int mcp_grpc_client_streams(mcp_grpc_client *c, mcp_grpc_stream_fn fn,
                            void *user_data) {
  return streams(&c->ep, fn, user_data);
}

int mcp_grpc_client_stats_versioned(mcp_grpc_client *c, int version,
                                    mcp_grpc_stats *st) {
  return stats(&c->ep, version, st);
}

int mcp_grpc_client_reauthorize(mcp_grpc_client *c) {
  mcp_grpc_job job = {.kind = MCP_GRPC_JOB_REAUTHORIZE};
  return mcp_grpc_ep_submit(&c->ep, &job);
}
