/* The public objects: a source or a sink on the application's loop, the
 * jobs other threads hand over, deferred kicks, and shutdown. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct mcp_h2c_source {
  mcp_h2c_ep ep;
};

struct mcp_h2c_sink {
  mcp_h2c_ep ep;
};

struct mcp_h2c_client {
  mcp_h2c_ep ep;
};

mcp_tstamp mcp_h2c_now(void) { return (mcp_tstamp)uv_hrtime(); }

const char *mcp_h2c_method(mcp_service service, int sink_dials) {
  return mcp_service_method(service, sink_dials);
}

/* ------------------------------------------------------------------ */
/* Streams, as the application sees them                               */
/* ------------------------------------------------------------------ */

void mcp_h2c_info_fill(const mcp_h2c_stream *s, mcp_h2c_stream_info *info) {
  mcp_stream_rec_info(&s->rec, info);
  info->id = s->seq;
  info->peer = s->c->peer;
  info->sending = s->out != NULL;
  info->initial = mcp_admit_ticket_initial(s->ticket);
  info->stream = s->eng;
  info->api =
      s->api ? s->api : (s->svc || s->in_slot || s->rec.dialed ? "" : NULL);
  info->method = s->hd.path ? s->hd.path : "";
  info->tls = s->c->ssl != NULL;
  info->identities = (const char *const *)s->c->ids.v;
  info->nidentities = s->c->ids.n;
}

void mcp_h2c_notify_stream(mcp_h2c_stream *s, mcp_h2c_stream_event ev) {
  mcp_h2c_ep *ep = s->c->ep;
  if (ev == MCP_H2C_STREAM_OPENED)
    ep->opened++;
  if (!ep->opts.on_stream || ep->stopping)
    return;
  /* CLOSED only pairs with an OPENED; REFUSED pairs with nothing. */
  if (ev == MCP_H2C_STREAM_CLOSED && !s->announced)
    return;
  if (ev != MCP_H2C_STREAM_REFUSED)
    s->announced = ev == MCP_H2C_STREAM_OPENED;
  mcp_h2c_stream_info info;
  mcp_h2c_info_fill(s, &info);
  ep->opts.on_stream(ev, &info, ep->opts.user_data);
}

static size_t for_streams(mcp_h2c_ep *ep, mcp_h2c_stream_fn fn, void *ud) {
  size_t n = 0;
  for (mcp_h2c_conn *c = ep->conns; c; c = c->next) {
    for (mcp_h2c_stream *s = c->streams; s; s = s->next) {
      if (!s->eng)
        continue;
      n++;
      if (fn) {
        mcp_h2c_stream_info info;
        mcp_h2c_info_fill(s, &info);
        fn(&info, ud);
      }
    }
  }
  return n;
}

static void stats(const mcp_h2c_ep *ep, mcp_h2c_stats *st) {
  memset(st, 0, sizeof(*st));
  st->connections = ep->nconns;
  st->streams = for_streams((mcp_h2c_ep *)ep, NULL, NULL);
  st->bytes_read = ep->bytes_read;
  st->bytes_written = ep->bytes_written;
  st->messages_received = ep->msgs_in;
  st->messages_sent = ep->msgs_out;
  st->write_buffered = ep->write_buffered;
  st->msg_buffered = ep->msg_buffered;
  st->read_buffered = ep->read_buffered;
  mcp_transport_stats_admit(st, ep->admit);
  st->tls_handshakes = ep->tls_handshakes;
  st->tls_handshake_failures = ep->tls_handshake_failures;
  st->tls_handshake_timeouts = ep->tls_handshake_timeouts;
  st->refused_handshakes = ep->refused_handshakes;
  st->handshaking = ep->handshaking;
  st->refused_unauthenticated = ep->refused_unauthenticated;
  st->refused_denied = ep->refused_denied;
  st->revoked = ep->revoked;
  st->refused_connection_streams = ep->refused_connection_streams;
  st->rapid_resets = ep->rapid_resets;
  st->accept_pauses = ep->accept_pauses;
  st->accept_paused = ep->accept_paused;
  st->opened = ep->opened;
  mcp_h2c_tls_stats(ep, st);
}

/* ------------------------------------------------------------------ */
/* Deferred work                                                       */
/* ------------------------------------------------------------------ */

static void on_idle(uv_idle_t *h) {
  mcp_h2c_ep *ep = h->data;
  uv_idle_stop(h);
  ep->idle_active = 0;
  if (ep->admit_dirty)
    mcp_h2c_admit_run(ep);
  int all = ep->notify_all;
  ep->notify_all = 0;
  mcp_h2c_conn *next;
  for (mcp_h2c_conn *c = ep->conns; c; c = next) {
    next = c->next;
    if (all) {
      for (mcp_h2c_stream *s = c->streams; s; s = s->next)
        s->dirty = 1;
      c->dirty = 1;
    }
    if (c->dirty) /* marked by someone outside its own callbacks */
      mcp_h2c_conn_kick(c);
  }
}

void mcp_h2c_ep_schedule(mcp_h2c_ep *ep) {
  if (ep->idle_active || ep->stopping > 1)
    return;
  ep->idle_active = 1;
  uv_idle_start(&ep->idle, on_idle);
}

static void run_jobs(mcp_h2c_ep *ep) {
  mcp_jobq_job *q = mcp_jobq_take(&ep->jobs, NULL);
  if (!q)
    return;
  while (q) {
    mcp_jobq_job *next = q->next;
    mcp_h2c_job *job = MCP_H2C_CONTAINER(q, mcp_h2c_job, q);
    mcp_tstamp now = mcp_h2c_now();
    if (job->kind == MCP_H2C_JOB_STORE)
      job->store_fn(ep->source_opts.store, now, job->user_data);
    else if (job->kind == MCP_H2C_JOB_RUN)
      job->run_fn(now, job->user_data);
    else
      job->state_fn(ep->state, now, job->user_data);
    mcp_jobq_done(&ep->jobs, q);
    q = next;
  }
  ep->notify_all = 1; /* the store or state may have changed */
  mcp_h2c_ep_schedule(ep);
}

static void on_async(uv_async_t *h) { run_jobs(h->data); }

/* The queue's wake function. Under the queue's lock: del() closes the
 * handle only after closing the queue under it. */
static void wake(void *user_data) {
  mcp_h2c_ep *ep = user_data;
  uv_async_send(&ep->async);
}

static int submit(mcp_h2c_ep *ep, mcp_h2c_job *job) {
  uv_thread_t self = uv_thread_self();
  return mcp_jobq_submit(&ep->jobs, &job->q, sizeof(*job),
                         uv_thread_equal(&self, &ep->loop_thread));
}

/* ------------------------------------------------------------------ */
/* Life cycle                                                          */
/* ------------------------------------------------------------------ */

/* options.services, copied: the array and the method strings (the
 * user_data stay the caller's). */
static int copy_services(mcp_h2c_ep *ep, const mcp_h2c_options *opts) {
  if (!opts->nservices)
    return 0;
  mcp_service_def *d = mcp_h2c_calloc(&ep->mem, opts->nservices, sizeof(*d));
  if (!d)
    return MCP_ERR_NOMEM;
  ep->services = d;
  ep->nservices = opts->nservices;
  for (size_t i = 0; i < opts->nservices; ++i) {
    d[i] = opts->services[i];
    d[i].method = NULL; /* until copied: free_services() frees ours only */
    size_t n = strlen(opts->services[i].method) + 1;
    char *m = mcp_h2c_malloc(&ep->mem, n);
    if (!m)
      return MCP_ERR_NOMEM; /* the caller frees what was copied */
    memcpy(m, opts->services[i].method, n);
    d[i].method = m;
  }
  return 0;
}

/* MCP's defs, from the core: a source's from its session options (none
 * when MCP is off), a sink's from its state (a listening sink must be
 * RESOURCE). */
static int make_side(mcp_h2c_ep *ep, const mcp_h2c_options *opts,
                     mcp_h2c_role role) {
  if (role == MCP_H2C_ROLE_SOURCE && !opts->no_mcp)
    return mcp_side_source_new(&ep->side, &ep->source_opts, &ep->mem);
  if (role == MCP_H2C_ROLE_SINK && ep->state)
    return mcp_side_sink_new(&ep->side, ep->state,
                             opts->mode == MCP_H2C_DIAL, &ep->mem);
  return 0;
}

/* Frees the copies of copy_services() and make_side(). */
static void free_services(mcp_h2c_ep *ep) {
  mcp_side_del(ep->side);
  ep->side = NULL;
  mcp_service_def *d = (mcp_service_def *)ep->services;
  for (size_t i = 0; d && i < ep->nservices; ++i)
    mcp_h2c_free(&ep->mem, (char *)d[i].method);
  mcp_h2c_free(&ep->mem, d);
  ep->services = NULL;
  ep->nservices = 0;
}

static void free_tls(mcp_h2c_ep *ep) {
  mcp_h2c_tls_free(ep);
  for (int i = 0; i < 4; i++) {
    mcp_h2c_free(&ep->mem, ep->tls_paths[i]);
    ep->tls_paths[i] = NULL;
  }
}

/* TLS: the paths copied, the files read (before any handle exists). */
static int start_tls(mcp_h2c_ep *ep, const mcp_h2c_options *opts) {
  mcp_h2c_tls_options *t = &ep->opts.tls;
  if (!mcp_h2c_tls_wanted(&opts->tls)) {
    memset(t, 0, sizeof(*t)); /* a server_name alone means nothing */
    return 0;
  }
  const char *in[4] = {opts->tls.cert_file, opts->tls.key_file,
                       opts->tls.ca_file, opts->tls.server_name};
  for (int i = 0; i < 4; i++)
    if (in[i] && !(ep->tls_paths[i] = mcp_h2c_strdup(&ep->mem, in[i])))
      return MCP_ERR_NOMEM;
  t->cert_file = ep->tls_paths[0];
  t->key_file = ep->tls_paths[1];
  t->ca_file = ep->tls_paths[2];
  t->server_name = ep->tls_paths[3];
  return mcp_h2c_tls_new(ep, opts->mode == MCP_H2C_LISTEN);
}

static void ep_free(mcp_h2c_ep *ep) {
  void (*on_closed)(void *) = ep->opts.on_closed;
  void *ud = ep->opts.user_data;
  mcp_jobq_fini(&ep->jobs);
  mcp_h2c_free(&ep->mem, ep->address);
  mcp_h2c_free(&ep->mem, ep->authority);
  mcp_h2c_free(&ep->mem, ep->slots);
  free_services(ep);
  mcp_h2c_addr_free(&ep->addr);
  mcp_h2c_admit_free(ep);
  free_tls(ep);
  mcp_mem mem = ep->mem;
  mcp_h2c_free(&mem, ep); /* the ep is the first member of the public object */
  if (on_closed)
    on_closed(ud);
}

void mcp_h2c_ep_unref(mcp_h2c_ep *ep) {
  if (--ep->refs == 0 && ep->stopping)
    ep_free(ep);
}

static void on_handle_closed(uv_handle_t *h) { mcp_h2c_ep_unref(h->data); }

static char *dup_str(mcp_h2c_ep *ep, const char *s) {
  return mcp_h2c_strdup(&ep->mem, s);
}

static void shutdown_ep(mcp_h2c_ep *ep);

int mcp_h2c_ep_select_addr(mcp_h2c_ep *ep, size_t i) {
  const char *s = ep->address;
  for (size_t k = 0; k < i; ++k)
    s = strchr(s, ',') + 1;
  size_t n = strcspn(s, ",");
  char one[512];
  if (n >= sizeof(one))
    return MCP_ERR_INVALID_ARGUMENT;
  memcpy(one, s, n);
  one[n] = '\0';
  mcp_h2c_addr a;
  int rv = mcp_h2c_addr_parse_mem(one, &a, &ep->mem);
  if (rv < 0)
    return rv;
  if (!ep->fixed_authority) {
    /* host:port as dialed ("localhost" for a unix socket, as gRPC). */
    char au[300];
    if (a.is_unix)
      snprintf(au, sizeof(au), "localhost");
    else if (strchr(a.host, ':'))
      snprintf(au, sizeof(au), "[%.256s]:%s", a.host, a.port);
    else
      snprintf(au, sizeof(au), "%.256s:%s", a.host, a.port);
    char *d = dup_str(ep, au);
    if (!d) {
      mcp_h2c_addr_free(&a);
      return MCP_ERR_NOMEM;
    }
    mcp_h2c_free(&ep->mem, ep->authority);
    ep->authority = d;
  }
  mcp_h2c_addr_free(&ep->addr);
  ep->addr = a;
  ep->addr_index = i;
  snprintf(ep->target, sizeof(ep->target), "%s", one);
  return 0;
}

/* Fills |ep| (calloc'd) and starts it. On failure before any handle
 * exists, the caller frees |ep|; after, |ep| frees itself on the loop
 * and |*freed| is set. */
static int ep_start(mcp_h2c_ep *ep, uv_loop_t *loop,
                    const mcp_h2c_options *opts, mcp_h2c_role role,
                    int *freed) {
  *freed = 0;
  ep->role = role;
  ep->loop = loop;
  ep->opts = *opts;
  ep->opts.address = NULL;
  ep->opts.authority = NULL;
  ep->opts.services = ep->services; /* the copies (copy_services()) */
  ep->no_mcp = opts->no_mcp;
  ep->loop_thread = uv_thread_self();
  mcp_h2c_options *o = &ep->opts;
  if (o->max_recv_message_size < 0)
    o->max_recv_message_size = -1;
  else if (o->max_recv_message_size == 0)
    o->max_recv_message_size = 64 << 20;
  if (o->max_send_message_size < 0)
    o->max_send_message_size = -1;
  else if (o->max_send_message_size == 0)
    o->max_send_message_size = 64 << 20;
  if (o->keepalive_timeout_ms <= 0)
    o->keepalive_timeout_ms = 20000;
  if (o->stream_window_size <= 0)
    o->stream_window_size = 1 << 20;
  if (o->connection_window_size < o->stream_window_size)
    o->connection_window_size = o->stream_window_size;
  if (o->stream_reset_rate == 0)
    o->stream_reset_rate = 33;
  if (o->stream_reset_burst == 0)
    o->stream_reset_burst = 1000;
  if (o->max_streams_per_connection <= 0)
    o->max_streams_per_connection = 1024;
  if (o->max_concurrent_streams <= 0)
    o->max_concurrent_streams = o->max_streams_per_connection > INT32_MAX / 2
                                    ? INT32_MAX
                                    : 2 * o->max_streams_per_connection;
  if (o->write_buffer_size <= 0)
    o->write_buffer_size = 64 << 10;
  if (o->write_buffer_size < 16 << 10)
    o->write_buffer_size = 16 << 10;
  if (o->handshake_timeout_ms <= 0)
    o->handshake_timeout_ms = 10000;
  if (o->max_handshakes <= 0)
    o->max_handshakes = 1024;
  if (o->max_handshakes_per_peer <= 0)
    o->max_handshakes_per_peer = 32;

  /* DIAL: a comma-separated list, dialed in turn (client.c); every
   * element must parse now. LISTEN: one address. */
  ep->address = dup_str(ep, opts->address);
  ep->fixed_authority = opts->authority != NULL;
  if (opts->authority)
    ep->authority = dup_str(ep, opts->authority);
  if (!ep->address || (opts->authority && !ep->authority)) {
    mcp_h2c_free(&ep->mem, ep->address);
    mcp_h2c_free(&ep->mem, ep->authority);
    return MCP_ERR_NOMEM;
  }
  ep->naddrs = 1;
  for (const char *p = ep->address; (p = strchr(p, ',')) != NULL; ++p)
    ++ep->naddrs;
  int rv = ep->naddrs > 1 && opts->mode == MCP_H2C_LISTEN
               ? MCP_ERR_INVALID_ARGUMENT
               : 0;
  for (size_t i = ep->naddrs; rv == 0 && i-- > 0;) /* ends on the first */
    rv = mcp_h2c_ep_select_addr(ep, i);
  if (rv < 0) {
    mcp_h2c_addr_free(&ep->addr);
    mcp_h2c_free(&ep->mem, ep->address);
    mcp_h2c_free(&ep->mem, ep->authority);
    return rv;
  }
  ep->opts.address = ep->address;
  ep->opts.authority = ep->authority;
  rv = start_tls(ep, opts);
  if (rv < 0) {
    free_tls(ep);
    mcp_h2c_addr_free(&ep->addr);
    mcp_h2c_free(&ep->mem, ep->address);
    mcp_h2c_free(&ep->mem, ep->authority);
    return rv;
  }
  if (!o->rand) {
    ep->rand_state = uv_hrtime() ^ (uint64_t)(uintptr_t)ep;
    o->rand = mcp_rand_splitmix64;
    o->rand_user_data = &ep->rand_state;
  }
  /* The client object's connection attempts; a dialing MCP side holds
   * its own reconnection (the core's), with the options' backoff. */
  mcp_redial_init(&ep->redial, &o->backoff, o->rand, o->rand_user_data,
                  mcp_h2c_now());
  if (ep->side && role != MCP_H2C_ROLE_CLIENT)
    mcp_side_set_backoff(ep->side, &o->backoff, o->rand, o->rand_user_data,
                         mcp_h2c_now());

  if (mcp_jobq_init(&ep->jobs, o->max_queued_updates, &ep->mem, wake, ep) != 0)
    goto fail_strings;
  if (uv_async_init(loop, &ep->async, on_async) != 0)
    goto fail_queue;
  ep->async.data = ep;
  uv_unref((uv_handle_t *)&ep->async); /* jobs alone keep no loop alive */
  uv_idle_init(loop, &ep->idle);
  ep->idle.data = ep;
  ep->refs = 2;

  if (opts->mode == MCP_H2C_LISTEN) {
    rv = mcp_h2c_admit_init(ep);
    if (rv == 0)
      rv = mcp_h2c_server_start(ep);
  } else {
    mcp_h2c_client_start(ep);
  }
  if (rv < 0) {
    int e = errno; /* why the listener failed, for the caller */
    ep->opts.on_closed = NULL; /* a failed creation reports nothing */
    shutdown_ep(ep);
    *freed = 1;
    errno = e;
  }
  return rv;

fail_queue:
  mcp_jobq_fini(&ep->jobs);
fail_strings:
  free_tls(ep);
  mcp_h2c_addr_free(&ep->addr);
  mcp_h2c_free(&ep->mem, ep->address);
  mcp_h2c_free(&ep->mem, ep->authority);
  return MCP_ERR_NOMEM;
}

/* Frees every session now, ends the streams, closes what can be closed
 * now and lets the rest drain on the loop. */
static void shutdown_ep(mcp_h2c_ep *ep) {
  mcp_jobq_close(&ep->jobs, 0);
  run_jobs(ep); /* queued before del(): run, as the gRPC transport does */

  int listen = ep->opts.mode == MCP_H2C_LISTEN;
  /* Streams end now, as far as the application is concerned. */
  for (mcp_h2c_conn *c = ep->conns; c; c = c->next) {
    for (mcp_h2c_stream *s = c->streams; s; s = s->next) {
      if (listen)
        mcp_h2c_stream_finish(s, MCP_CODE_UNAVAILABLE, "server shutting down");
      else
        mcp_h2c_stream_finish(s, MCP_CODE_CANCELLED, "client shutting down");
      mcp_h2c_notify_stream(s, MCP_H2C_STREAM_CLOSED);
      s->announced = 0;
    }
  }
  if (mcp_h2c_runs_client(ep))
    mcp_h2c_client_end_all(ep); /* the protocol hears of each call */
  ep->stopping = 1; /* no callback from here on, but on_closed */
  mcp_h2c_conn_linger_stop(ep);
  ep->grace_at = mcp_h2c_now() + ep->opts.shutdown_grace;
  if (listen)
    mcp_h2c_server_stop(ep);
  else
    mcp_h2c_client_stop(ep);

  mcp_h2c_conn *next;
  for (mcp_h2c_conn *c = ep->conns; c; c = next) {
    next = c->next;
    if (c->proto == MCP_H2C_PROTO_H2 && c->h2) {
      if (!ep->opts.shutdown_grace) {
        mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, "shutting down");
        continue;
      }
      if (!c->dialed)
        nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(c->h2),
                              NGHTTP2_NO_ERROR, NULL, 0);
      c->draining = 1;
      mcp_h2c_conn_kick(c);
    } else if (c->proto == MCP_H2C_PROTO_HTTP1 &&
               (c->writing || c->wfill.len || c->wtls.len)) {
      c->draining = 1; /* the answer being written goes out first */
      mcp_h2c_conn_kick(c);
    } else {
      mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, "shutting down");
    }
  }
  ep->stopping = 2; /* no more deferred kicks */
  if (ep->idle_active)
    uv_idle_stop(&ep->idle);
  uv_close((uv_handle_t *)&ep->async, on_handle_closed);
  uv_close((uv_handle_t *)&ep->idle, on_handle_closed);
  mcp_h2c_admit_close(ep);
}

/* |methods|: the MCP_METHODS_OF_* the object's MCP side serves. */
static int valid(uv_loop_t *loop, const mcp_h2c_options *opts,
                 unsigned methods) {
  if (!loop || !opts || !opts->address || !opts->address[0] ||
      (opts->mode != MCP_H2C_LISTEN && opts->mode != MCP_H2C_DIAL))
    return 0;
  if (opts->mode == MCP_H2C_DIAL && (opts->nservices || opts->no_mcp))
    return 0; /* services are served, never dialed */
  /* The MCP methods this object serves are its own (unless MCP is off);
   * the other side's may be a service, as on gRPC (docs/protocol.md). */
  const char *mcp[4];
  size_t nmcp = opts->no_mcp ? 0 : mcp_service_methods(methods, mcp);
  if (mcp_service_defs_check(opts->services, opts->nservices, mcp, nmcp) != 0)
    return 0;
  return 1;
}

/* LISTEN without MCP: neither store nor state is needed. */
static int no_mcp(const mcp_h2c_options *opts) {
  return opts && opts->mode == MCP_H2C_LISTEN && opts->no_mcp;
}

/* The caller's options of |version| into |o|, and the memory hook they
 * name into |mem|; < 0 for options that cannot be read. */
static int read_options(mcp_h2c_options *o, mcp_mem *mem, int version,
                        const mcp_h2c_options *caller_opts) {
  int rv = mcp_h2c_options_read(o, version, caller_opts);
  if (rv >= 0)
    mcp_h2c_mem_init(mem, o->mem);
  return rv;
}

/* The public *_update() (|sync| 0) and *_call() (1): |job| holds the
 * kind and the function, which must be there. */
static int submit_fn(mcp_h2c_ep *ep, mcp_h2c_job *job, void *user_data,
                     int sync) {
  if (!job->store_fn && !job->state_fn && !job->run_fn)
    return MCP_ERR_INVALID_ARGUMENT;
  job->user_data = user_data;
  job->q.sync = sync;
  return submit(ep, job);
}

/* The rest of a source's or a sink's creation: its services, its side,
 * its start. On failure |obj| (the object holding |ep|) is freed, here or,
 * once ep_start() made handles, by the loop. */
static int ep_open(mcp_h2c_ep *ep, void *obj, const mcp_mem *mem,
                   uv_loop_t *loop, const mcp_h2c_options *opts,
                   mcp_h2c_role role) {
  int freed = 0;
  int rv = copy_services(ep, opts);
  if (rv == 0)
    rv = make_side(ep, opts, role);
  if (rv == 0 && ep->side && opts->mode == MCP_H2C_DIAL) {
    /* Dialing: the side's client def, run as any protocol's. */
    ep->cdef = *mcp_side_client(ep->side);
    ep->slots = mcp_h2c_calloc(&ep->mem, ep->cdef.nslots, sizeof(*ep->slots));
    if (!ep->slots)
      rv = MCP_ERR_NOMEM;
  }
  if (rv == 0)
    rv = ep_start(ep, loop, opts, role, &freed);
  if (rv < 0 && !freed) {
    mcp_h2c_free(&ep->mem, ep->slots);
    ep->slots = NULL;
    free_services(ep);
    mcp_h2c_free(mem, obj);
  }
  return rv;
}

int mcp_h2c_source_new_versioned(mcp_h2c_source **psrc, uv_loop_t *loop,
                                 int version,
                                 const mcp_h2c_options *caller_opts,
                                 const mcp_source_options *session_opts) {
  mcp_h2c_options o;
  mcp_mem mem;
  if (read_options(&o, &mem, version, caller_opts) < 0)
    return MCP_ERR_INVALID_ARGUMENT;
  const mcp_h2c_options *opts = &o;
  if (!psrc || !valid(loop, opts, MCP_METHODS_OF_SOURCE) ||
      (!no_mcp(opts) &&
       (!session_opts ||
        (!session_opts->store && !session_opts->select_store))))
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_h2c_source *src = mcp_h2c_calloc(&mem, 1, sizeof(*src));
  if (!src)
    return MCP_ERR_NOMEM;
  mcp_h2c_ep_mem_init(&src->ep, opts->mem);
  if (session_opts)
    src->ep.source_opts = *session_opts;
  int rv = ep_open(&src->ep, src, &mem, loop, opts, MCP_H2C_ROLE_SOURCE);
  if (rv < 0)
    return rv;
  *psrc = src;
  return 0;
}

void mcp_h2c_source_del(mcp_h2c_source *src) {
  if (src)
    shutdown_ep(&src->ep);
}

int mcp_h2c_source_port(const mcp_h2c_source *src) { return src->ep.port; }

void mcp_h2c_source_notify(mcp_h2c_source *src) {
  src->ep.notify_all = 1;
  mcp_h2c_ep_schedule(&src->ep);
}

int mcp_h2c_source_update(mcp_h2c_source *src, mcp_h2c_store_fn fn,
                          void *user_data) {
  mcp_h2c_job job = {.kind = MCP_H2C_JOB_STORE, .store_fn = fn};
  return submit_fn(&src->ep, &job, user_data, 0);
}

int mcp_h2c_source_call(mcp_h2c_source *src, mcp_h2c_store_fn fn,
                        void *user_data) {
  mcp_h2c_job job = {.kind = MCP_H2C_JOB_STORE, .store_fn = fn};
  return submit_fn(&src->ep, &job, user_data, 1);
}

/* *_streams() and *_stats(), loop thread only. */
/* Asks the authorization hook again about every open call's peer (LISTEN)
 * or every connection's server (DIAL); ends what it now refuses. */
static int reauthorize(mcp_h2c_ep *ep) {
  if (!mcp_h2c_on_loop_thread(ep) || ep->stopping)
    return MCP_ERR_INVALID_ARGUMENT;
  if (!ep->opts.authorize)
    return 0;
  mcp_h2c_conn *next;
  for (mcp_h2c_conn *c = ep->conns; c; c = next) {
    next = c->next;
    if (c->closing || (c->ssl && !c->tls_done))
      continue;
    if (c->dialed) {
      if (!c->ssl && c->proto == MCP_H2C_PROTO_DIALING)
        continue; /* not connected: authorized once it is */
      const char *details = NULL;
      int code = mcp_h2c_conn_authorize(c, &details);
      if (code != 0) {
        ep->revoked += c->nstreams;
        mcp_h2c_conn_close(c, code, details);
      }
      continue;
    }
    for (mcp_h2c_stream *s = c->streams; s; s = s->next) {
      if (s->kind != MCP_H2C_SK_GRPC || s->finishing)
        continue;
      const char *details = NULL;
      int code = mcp_h2c_conn_authorize(c, &details);
      if (code != 0) {
        ep->revoked++;
        mcp_h2c_stream_finish(s, code, details);
      }
    }
  }
  return 0;
}

int mcp_h2c_source_reauthorize(mcp_h2c_source *src) {
  return reauthorize(&src->ep);
}

int mcp_h2c_sink_reauthorize(mcp_h2c_sink *sink) {
  return reauthorize(&sink->ep);
}

int mcp_h2c_client_reauthorize(mcp_h2c_client *c) {
  return reauthorize(&c->ep);
}

static int streams(mcp_h2c_ep *ep, mcp_h2c_stream_fn fn, void *user_data) {
  if (!mcp_h2c_on_loop_thread(ep))
    return MCP_ERR_INVALID_ARGUMENT;
  size_t n = for_streams(ep, fn, user_data);
  return n > INT32_MAX ? INT32_MAX : (int)n;
}

static int stats_versioned(const mcp_h2c_ep *ep, int version,
                           mcp_h2c_stats *st) {
  if (!st || version < 1 || !mcp_h2c_on_loop_thread(ep))
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_h2c_stats full;
  stats(ep, &full);
  return mcp_transport_stats_write(st, version, &full);
}

int mcp_h2c_source_streams(mcp_h2c_source *src, mcp_h2c_stream_fn fn,
                           void *user_data) {
  return streams(&src->ep, fn, user_data);
}

int mcp_h2c_source_stats_versioned(mcp_h2c_source *src, int version,
                                   mcp_h2c_stats *st) {
  return stats_versioned(&src->ep, version, st);
}

int mcp_h2c_sink_new_versioned(mcp_h2c_sink **psink, uv_loop_t *loop,
                               int version, const mcp_h2c_options *caller_opts,
                               mcp_sink_state *state) {
  mcp_h2c_options o;
  mcp_mem mem;
  if (read_options(&o, &mem, version, caller_opts) < 0)
    return MCP_ERR_INVALID_ARGUMENT;
  const mcp_h2c_options *opts = &o;
  if (!psink || !valid(loop, opts, MCP_METHODS_OF_SINK) ||
      (!state && !no_mcp(opts)))
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_h2c_sink *sink = mcp_h2c_calloc(&mem, 1, sizeof(*sink));
  if (!sink)
    return MCP_ERR_NOMEM;
  mcp_h2c_ep_mem_init(&sink->ep, opts->mem);
  sink->ep.state = state;
  int rv = ep_open(&sink->ep, sink, &mem, loop, opts, MCP_H2C_ROLE_SINK);
  if (rv < 0)
    return rv;
  *psink = sink;
  return 0;
}

void mcp_h2c_sink_del(mcp_h2c_sink *sink) {
  if (sink)
    shutdown_ep(&sink->ep);
}

int mcp_h2c_sink_port(const mcp_h2c_sink *sink) { return sink->ep.port; }

int mcp_h2c_sink_call(mcp_h2c_sink *sink, mcp_h2c_state_fn fn,
                      void *user_data) {
  mcp_h2c_job job = {.kind = MCP_H2C_JOB_STATE, .state_fn = fn};
  return submit_fn(&sink->ep, &job, user_data, 1);
}

int mcp_h2c_sink_finish(mcp_h2c_sink *sink) {
  mcp_h2c_ep *ep = &sink->ep;
  if (!mcp_h2c_on_loop_thread(ep))
    return MCP_ERR_INVALID_ARGUMENT;
  ep->finished = 1; /* DIAL: no new call, no new connection */
  mcp_h2c_stream *s = ep->sink_stream;
  if (s && s->eng) {
    mcp_stream_finish(s->eng);
    s->dirty = 1;
    mcp_h2c_conn_mark(s->c);
  }
  return 0;
}

int mcp_h2c_sink_streams(mcp_h2c_sink *sink, mcp_h2c_stream_fn fn,
                         void *user_data) {
  return streams(&sink->ep, fn, user_data);
}

int mcp_h2c_sink_stats_versioned(mcp_h2c_sink *sink, int version,
                                 mcp_h2c_stats *st) {
  return stats_versioned(&sink->ep, version, st);
}

/* ------------------------------------------------------------------ */
/* Client                                                              */
/* ------------------------------------------------------------------ */

int mcp_h2c_client_new_versioned(mcp_h2c_client **pc, uv_loop_t *loop,
                                 int version,
                                 const mcp_h2c_options *caller_opts,
                                 const mcp_client_def *def) {
  mcp_h2c_options o;
  if (!pc || mcp_h2c_options_read(&o, version, caller_opts) < 0 || !def ||
      def->nslots == 0 || !def->method || !def->open || !def->ended)
    return MCP_ERR_INVALID_ARGUMENT;
  o.mode = MCP_H2C_DIAL;
  if (!valid(loop, &o, 0))
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_mem mem;
  mcp_h2c_mem_init(&mem, o.mem);
  mcp_h2c_client *c = mcp_h2c_calloc(&mem, 1, sizeof(*c));
  if (!c)
    return MCP_ERR_NOMEM;
  mcp_h2c_ep_mem_init(&c->ep, o.mem);
  c->ep.cdef = *def;
  c->ep.slots = mcp_h2c_calloc(&mem, def->nslots, sizeof(*c->ep.slots));
  if (!c->ep.slots) {
    mcp_h2c_free(&mem, c);
    return MCP_ERR_NOMEM;
  }
  int freed;
  int rv = ep_start(&c->ep, loop, &o, MCP_H2C_ROLE_CLIENT, &freed);
  if (rv < 0) {
    if (!freed) {
      mcp_h2c_free(&mem, c->ep.slots);
      mcp_h2c_free(&mem, c);
    }
    return rv;
  }
  *pc = c;
  return 0;
}

void mcp_h2c_client_del(mcp_h2c_client *c) {
  if (c)
    shutdown_ep(&c->ep);
}

int mcp_h2c_client_update(mcp_h2c_client *c, mcp_h2c_run_fn fn,
                          void *user_data) {
  mcp_h2c_job job = {.kind = MCP_H2C_JOB_RUN, .run_fn = fn};
  return submit_fn(&c->ep, &job, user_data, 0);
}

int mcp_h2c_client_call(mcp_h2c_client *c, mcp_h2c_run_fn fn,
                        void *user_data) {
  mcp_h2c_job job = {.kind = MCP_H2C_JOB_RUN, .run_fn = fn};
  return submit_fn(&c->ep, &job, user_data, 1);
}

void mcp_h2c_client_notify(mcp_h2c_client *c) {
  c->ep.notify_all = 1;
  mcp_h2c_ep_schedule(&c->ep);
}

int mcp_h2c_client_streams(mcp_h2c_client *c, mcp_h2c_stream_fn fn,
                           void *user_data) {
  return streams(&c->ep, fn, user_data);
}

int mcp_h2c_client_stats_versioned(mcp_h2c_client *c, int version,
                                   mcp_h2c_stats *st) {
  return stats_versioned(&c->ep, version, st);
}
