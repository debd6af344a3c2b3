/* Admission on a listening object, after authorization: how many streams
 * there may be, how fast new ones open, and how many sources' streams are
 * in their initial sync at once. Calls that must wait hold no session and
 * are not read from; they wait in FIFO queues, in order of arrival. */
#include <stdint.h>

#include "internal.h"

static void q_push(mcp_grpc_queue *q, mcp_grpc_stream *s) {
  s->queue = q;
  s->qnext = NULL;
  s->qprev = q->tail;
  if (q->tail)
    q->tail->qnext = s;
  else
    q->head = s;
  q->tail = s;
  q->n++;
}

static void q_remove(mcp_grpc_stream *s) {
  mcp_grpc_queue *q = s->queue;
  if (s->qprev)
    s->qprev->qnext = s->qnext;
  else
    q->head = s->qnext;
  if (s->qnext)
    s->qnext->qprev = s->qprev;
  else
    q->tail = s->qprev;
  q->n--;
  s->queue = NULL;
  s->qprev = s->qnext = NULL;
}

static mcp_grpc_stream *q_pop(mcp_grpc_queue *q) {
  mcp_grpc_stream *s = q->head;
  if (s)
    q_remove(s);
  return s;
}

static int rate_limited(const mcp_grpc_ep *ep) {
  return ep->opts.stream_rate != UINT32_MAX;
}

static void refill(mcp_grpc_ep *ep) {
  mcp_tstamp dt = ep->now - ep->tokens_at;
  ep->tokens_at = ep->now;
  ep->tokens += (double)dt * (double)ep->opts.stream_rate / 1e9;
  if (ep->tokens > (double)ep->opts.stream_burst)
    ep->tokens = (double)ep->opts.stream_burst;
}

static int take_token(mcp_grpc_ep *ep) {
  if (!rate_limited(ep))
    return 1;
  refill(ep);
  if (ep->tokens < 1.0)
    return 0;
  ep->tokens -= 1.0;
  return 1;
}

static int wants_slot(const mcp_grpc_stream *s) {
  return s->role == MCP_GRPC_ROLE_SOURCE &&
         s->ep->opts.max_initial_pushes != SIZE_MAX;
}

static void hold_slot(mcp_grpc_stream *s) {
  mcp_grpc_ep *ep = s->ep;
  s->initial_until = ep->now + ep->opts.initial_push_timeout;
  q_push(&ep->initial, s);
  if (ep->initial.n > ep->stats.initial_peak)
    ep->stats.initial_peak = ep->initial.n;
}

/* Past the rate: a source's stream needs an initial slot, then opens. */
static void admit_slot(mcp_grpc_stream *s) {
  mcp_grpc_ep *ep = s->ep;
  if (wants_slot(s)) {
    if (ep->wait_initial.n > 0 ||
        ep->initial.n >= ep->opts.max_initial_pushes) {
      q_push(&ep->wait_initial, s);
      return;
    }
    hold_slot(s);
  }
  mcp_grpc_stream_open(s);
}

void mcp_grpc_admit(mcp_grpc_stream *s) {
  mcp_grpc_ep *ep = s->ep;
  const mcp_grpc_options *o = &ep->opts;
  if (o->max_streams != SIZE_MAX && ep->nlive >= o->max_streams) {
    ep->stats.refused_max_streams++;
    mcp_grpc_stream_refuse(s, GRPC_STATUS_RESOURCE_EXHAUSTED,
                           "too many streams");
    return;
  }
  s->live = 1;
  ep->nlive++;
  /* Those already waiting go first. */
  if (ep->wait_rate.n > 0 || !take_token(ep)) {
    if (ep->wait_rate.n < o->stream_burst) {
      q_push(&ep->wait_rate, s);
      return;
    }
    ep->stats.refused_rate++;
    mcp_grpc_stream_refuse(s, GRPC_STATUS_UNAVAILABLE,
                           "too many new streams; retry later");
    return;
  }
  admit_slot(s);
}

void mcp_grpc_admit_tick(mcp_grpc_ep *ep, mcp_tstamp *deadline) {
  if (ep->stopping)
    return;
  const mcp_grpc_options *o = &ep->opts;
  if (ep->wait_rate.n > 0) {
    refill(ep);
    while (ep->wait_rate.head && ep->tokens >= 1.0) {
      ep->tokens -= 1.0;
      admit_slot(q_pop(&ep->wait_rate));
    }
    if (ep->wait_rate.head) {
      double missing = 1.0 - ep->tokens;
      mcp_tstamp at =
          ep->now + (mcp_tstamp)(missing * 1e9 / (double)o->stream_rate) + 1;
      if (at < *deadline)
        *deadline = at;
    }
  }
  /* Slots are held in the order they were given: the oldest times out
   * first. A stream past its timeout goes on, without a slot. */
  while (ep->initial.head && ep->initial.head->initial_until <= ep->now) {
    ep->stats.initial_timeouts++;
    q_remove(ep->initial.head);
  }
  while (ep->wait_initial.head && ep->initial.n < o->max_initial_pushes) {
    mcp_grpc_stream *s = q_pop(&ep->wait_initial);
    hold_slot(s);
    mcp_grpc_stream_open(s); /* on failure, leaves the slot at once */
  }
  if (ep->initial.head && ep->initial.head->initial_until < *deadline)
    *deadline = ep->initial.head->initial_until;
}

void mcp_grpc_admit_check_initial(mcp_grpc_stream *s) {
  mcp_grpc_ep *ep = s->ep;
  if (s->queue != &ep->initial || !s->src)
    return;
  size_t n = mcp_source_session_collection_count(s->src);
  if (n == 0)
    return; /* nothing asked yet */
  for (size_t i = 0; i < n; i++) {
    mcp_collection_status st;
    if (mcp_source_session_collection_status(s->src, i, ep->now, &st) < 0)
      return;
    /* A collection the store does not know gets no push to answer. */
    if (st.known && st.acks + st.nacks == 0)
      return;
  }
  q_remove(s); /* the next tick gives the slot to a waiting stream */
}

void mcp_grpc_admit_leave(mcp_grpc_stream *s) {
  if (s->queue)
    q_remove(s);
  if (s->live) {
    s->live = 0;
    s->ep->nlive--;
  }
}
