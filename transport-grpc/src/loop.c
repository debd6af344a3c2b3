/* The transport thread: one completion queue, the jobs other threads hand
 * over, wake-ups, and the timers of every stream. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/support/time.h>

#include "internal.h"

/* The object whose loop runs on this thread, to refuse a synchronous call
 * from inside one of its callbacks (it would wait for itself). */
static _Thread_local mcp_grpc_ep *current_ep;

static void wake_done(mcp_grpc_tag *tag, int ok) {
  (void)ok;
  mcp_grpc_ep *ep = MCP_GRPC_CONTAINER(tag, mcp_grpc_ep, wake_tag);
  grpc_call_unref(ep->wake_call);
  ep->wake_call = NULL;
  grpc_metadata_array_destroy(&ep->wake_md);
  grpc_slice_unref(ep->wake_details);
  /* Cleared before the loop takes the job list, so a job queued after the
   * take always starts a new wake-up. */
  pthread_mutex_lock(&ep->jobs.mu);
  ep->wake_pending = 0;
  pthread_mutex_unlock(&ep->jobs.mu);
}

/*
 * Wakes the transport thread out of grpc_completion_queue_next(). gRPC's C
 * core has no public alarm (grpc_alarm is C++ only), so a call on a lame
 * channel stands in: it fails at once and posts its tag to our queue.
 * At most one is in flight. Called with the queue's lock held (its wake
 * function).
 */
static void wake_locked(void *user_data) {
  mcp_grpc_ep *ep = user_data;
  if (ep->wake_pending)
    return;
  ep->wake_pending = 1;
  grpc_metadata_array_init(&ep->wake_md);
  ep->wake_call = grpc_channel_create_call(
      ep->lame, NULL, GRPC_PROPAGATE_DEFAULTS, ep->cq,
      grpc_slice_from_static_string("/mcp.grpc/wake"), NULL,
      gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  grpc_op ops[2];
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[1].data.recv_status_on_client.trailing_metadata = &ep->wake_md;
  ops[1].data.recv_status_on_client.status = &ep->wake_status;
  ops[1].data.recv_status_on_client.status_details = &ep->wake_details;
  grpc_call_error e =
      grpc_call_start_batch(ep->wake_call, ops, 2, &ep->wake_tag, NULL);
  if (e != GRPC_CALL_OK)
    abort(); /* cannot fail on a fresh call: a bug here */
}

int mcp_grpc_ep_submit(mcp_grpc_ep *ep, mcp_grpc_job *job) {
  return mcp_jobq_submit(&ep->jobs, &job->q, sizeof(*job), current_ep == ep);
}

void mcp_grpc_stream_info_fill(const mcp_grpc_stream *s,
                               mcp_grpc_stream_info *info) {
  mcp_stream_rec_info(&s->rec, info);
  info->id = s->id;
  info->peer = s->peer ? s->peer : "";
  info->identities = (const char *const *)s->ids.v;
  info->nidentities = s->ids.n;
  info->tls = s->tls;
  info->initial = mcp_admit_ticket_initial(s->ticket);
  info->stream = s->st;
  info->api = s->role == MCP_GRPC_ROLE_NONE ? NULL : s->api ? s->api : "";
  info->sending = s->send_bb != NULL; /* a message, not metadata */
  info->method = ""; /* gRPC's call keeps it; this transport does not */
}

static void fill_stats(mcp_grpc_ep *ep, mcp_grpc_stats *st) {
  *st = ep->stats;
  st->streams = 0;
  for (mcp_grpc_stream *s = ep->streams; s; s = s->next)
    if (s->st)
      st->streams++;
  mcp_transport_stats_admit(st, ep->admit);
}

static void run_job(mcp_grpc_ep *ep, mcp_grpc_job *job) {
  switch (job->kind) {
  case MCP_GRPC_JOB_STORE:
    job->store_fn(ep->source_opts.store, ep->now, job->user_data);
    break;
  case MCP_GRPC_JOB_STATE:
    job->state_fn(ep->state, ep->now, job->user_data);
    break;
  case MCP_GRPC_JOB_RUN:
    job->run_fn(ep->now, job->user_data);
    break;
  case MCP_GRPC_JOB_STATS:
    fill_stats(ep, job->user_data);
    break;
  case MCP_GRPC_JOB_REAUTHORIZE: {
    mcp_grpc_stream *next;
    for (mcp_grpc_stream *s = ep->streams; s; s = next) {
      next = s->next; /* a stream is never freed here: its close op is out */
      mcp_grpc_stream_reauthorize(s);
    }
    break;
  }
  case MCP_GRPC_JOB_FINISH:
    ep->finished = 1; /* DIAL: no new stream */
    if (ep->sink_stream && ep->sink_stream->st) {
      mcp_stream_finish(ep->sink_stream->st);
      ep->sink_stream->dirty = 1;
    }
    break;
  case MCP_GRPC_JOB_STREAMS:
    for (mcp_grpc_stream *s = ep->streams; s; s = s->next) {
      /* Calls waiting for admission have no session yet. */
      if (s->role == MCP_GRPC_ROLE_NONE || s->state != MCP_GRPC_ST_OPEN ||
          !s->st)
        continue;
      mcp_grpc_stream_info info;
      mcp_grpc_stream_info_fill(s, &info);
      job->stream_fn(&info, job->user_data);
    }
    break;
  }
}

static void run_jobs(mcp_grpc_ep *ep) {
  int closing;
  mcp_jobq_job *q = mcp_jobq_take(&ep->jobs, &closing);
  if (q)
    ep->all_dirty = 1; /* the store or state may have changed */
  while (q) {
    mcp_jobq_job *next = q->next;
    mcp_grpc_job *job = MCP_GRPC_CONTAINER(q, mcp_grpc_job, q);
    run_job(ep, job);
    mcp_jobq_done(&ep->jobs, q);
    q = next;
  }

  /* Jobs queued before del() ran above; now shut down. */
  if (closing && !ep->stopping) {
    ep->stopping = 1;
    if (ep->opts.mode == MCP_GRPC_LISTEN)
      mcp_grpc_server_shutdown(ep);
    else
      mcp_grpc_svc_client_shutdown(ep);
  }
}

static int finished(mcp_grpc_ep *ep) {
  if (ep->server || ep->nchans || ep->streams ||
      ep->accept_pending)
    return 0;
  pthread_mutex_lock(&ep->jobs.mu);
  int busy = ep->wake_pending;
  pthread_mutex_unlock(&ep->jobs.mu);
  return !busy;
}

/* Runs timers and pending pushes; returns the next deadline. */
static mcp_tstamp tick(mcp_grpc_ep *ep) {
  mcp_tstamp dl = MCP_TSTAMP_MAX;
  if (ep->opts.mode == MCP_GRPC_LISTEN) {
    mcp_grpc_admit_tick(ep, &dl);
    mcp_grpc_server_tick(ep, &dl);
  } else if (ep->client_def.nslots) {
    mcp_grpc_svc_client_tick(ep, &dl);
  }
  /* A pump may wake streams (mcp_stream_wake: another one's fate
   * changed): passes go on while it does, so that a woken stream is
   * pumped before the loop sleeps; a stream that keeps waking is pumped
   * again at the next turn of the loop. */
  for (int pass = 0; pass < 8; pass++) {
    ep->woken = 0;
    for (mcp_grpc_stream *s = ep->streams; s; s = s->next) {
      if (ep->all_dirty || s->dirty || s->expiry <= ep->now)
        mcp_grpc_stream_pump(s);
      if (s->expiry < dl)
        dl = s->expiry;
    }
    ep->all_dirty = 0;
    if (!ep->woken)
      break;
  }
  if (ep->woken)
    dl = ep->now;
  if (ep->admit_dirty) { /* a slot was freed: admit at once */
    ep->admit_dirty = 0;
    dl = ep->now;
  }
  if (ep->stopping && !ep->cq_shut && finished(ep)) {
    grpc_completion_queue_shutdown(ep->cq);
    ep->cq_shut = 1;
  }
  return dl;
}

static gpr_timespec deadline(const mcp_grpc_ep *ep, mcp_tstamp dl) {
  if (dl == MCP_TSTAMP_MAX)
    return gpr_inf_future(GPR_CLOCK_MONOTONIC);
  /* An expiry the session did not move past |now| would spin the loop. */
  mcp_tstamp rel = dl > ep->now ? dl - ep->now : MCP_MILLISECONDS;
  if (rel > 3600 * MCP_SECONDS)
    rel = 3600 * MCP_SECONDS;
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_nanos((int64_t)rel, GPR_TIMESPAN));
}

static void *loop_main(void *arg) {
  mcp_grpc_ep *ep = arg;
  current_ep = ep;
  ep->now = mcp_grpc_now();
  if (ep->opts.mode == MCP_GRPC_LISTEN)
    mcp_grpc_server_start(ep);
  for (;;) {
    ep->now = mcp_grpc_now();
    gpr_timespec d = deadline(ep, tick(ep));
    grpc_event ev = grpc_completion_queue_next(ep->cq, d, NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN)
      break;
    ep->now = mcp_grpc_now();
    if (ev.type == GRPC_OP_COMPLETE) {
      mcp_grpc_tag *tag = ev.tag;
      tag->fn(tag, ev.success);
    }
    run_jobs(ep);
  }
  current_ep = NULL;
  return NULL;
}

static void cq_destroy(grpc_completion_queue *cq) {
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL)
             .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(cq);
}

int mcp_grpc_ep_start(mcp_grpc_ep *ep) {
  int rv;
  ep->wake_tag.fn = wake_done;
  ep->now = mcp_grpc_now();
  if (mcp_jobq_init(&ep->jobs, ep->opts.max_queued_updates, &ep->mem,
                    wake_locked, ep) != 0)
    return MCP_ERR_NOMEM;
  ep->cq = grpc_completion_queue_create_for_next(NULL);
  ep->lame = grpc_lame_client_channel_create(
      "mcp-grpc-wake", GRPC_STATUS_UNAVAILABLE, "wake-up");

  if (ep->opts.mode == MCP_GRPC_LISTEN) {
    rv = mcp_grpc_admit_init(ep);
    if (rv == 0)
      rv = mcp_grpc_server_create(ep);
    if (rv < 0)
      goto fail;
  } else {
    mcp_rand_fn rand = ep->opts.rand;
    void *ud = ep->opts.rand_user_data;
    if (!rand) {
      ep->rand_state = ep->now ^ (uint64_t)(uintptr_t)ep;
      rand = mcp_rand_splitmix64;
      ud = &ep->rand_state;
    }
    /* The first attempt is immediate. The connection's reconnection and a
     * dialing MCP side's own (its calls') are the core's, with the
     * options' backoff. */
    mcp_redial_init(&ep->redial, &ep->opts.backoff, rand, ud, ep->now);
    if (ep->side)
      mcp_side_set_backoff(ep->side, &ep->opts.backoff, rand, ud, ep->now);
  }

  if (pthread_create(&ep->thread, NULL, loop_main, ep) != 0) {
    rv = MCP_ERR_NOMEM;
    goto fail;
  }
  return 0;

fail:
  if (ep->server) /* bound but never started: may be destroyed as is */
    grpc_server_destroy(ep->server);
  ep->server = NULL;
  mcp_grpc_admit_fini(ep);
  grpc_channel_destroy(ep->lame);
  cq_destroy(ep->cq);
  mcp_jobq_fini(&ep->jobs);
  return rv;
}

void mcp_grpc_ep_stop(mcp_grpc_ep *ep) {
  mcp_jobq_close(&ep->jobs, 1);
  pthread_join(ep->thread, NULL);
  /* The loop left after the queue's shutdown event: it is drained. */
  grpc_completion_queue_destroy(ep->cq);
  grpc_channel_destroy(ep->lame);
  mcp_grpc_admit_fini(ep); /* every stream is gone */
  mcp_jobq_fini(&ep->jobs);
}
