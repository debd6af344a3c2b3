/* Admission on a listening object, after authorization: the core's policy
 * (mcp_admit, mcp.h) applied to gRPC calls. Calls that must wait hold no
 * session and are not read from; the policy says when they run or end. */
#include <stdint.h>
#include <string.h>

#include "admitopts.h"
#include "internal.h"

int mcp_grpc_admit_init(mcp_grpc_ep *ep) {
  mcp_admit_options ao = MCP_ADMIT_OPTIONS_OF(&ep->opts);
  return mcp_admit_new(&ep->admit, &ao, &ep->mem, ep->now);
}

void mcp_grpc_admit_fini(mcp_grpc_ep *ep) {
  mcp_admit_del(ep->admit);
  ep->admit = NULL;
}

/* RUN opens the call, REFUSE ends it; WAIT leaves it unread. */
static void apply(mcp_grpc_stream *s, const mcp_admit_result *r) {
  if (r->verdict == MCP_ADMIT_RUN)
    mcp_grpc_stream_open(s); /* on failure, releases the ticket at once */
  else if (r->verdict == MCP_ADMIT_REFUSE)
    mcp_grpc_stream_refuse(s, r->status, r->details);
}

void mcp_grpc_admit(mcp_grpc_stream *s) {
  mcp_grpc_ep *ep = s->ep;
  /* Verified identity first, then address (issue 23). */
  char key[MCP_ADMIT_KEY_MAX];
  mcp_peer peer;
  memset(&peer, 0, sizeof(peer));
  peer.address = s->peer;
  mcp_identities_peer(&s->ids, &peer);
  mcp_peer_admit_key(&peer, key, sizeof(key));
  mcp_admit_result r;
  /* A slot for the services that push a whole state first (their def
   * says so); the others are counted and rate-limited, never held. */
  int initial = s->svc && (s->svc->flags & MCP_DEF_INITIAL_SYNC);
  int rv = mcp_admit_stream(ep->admit, key, initial, s, ep->now, &s->ticket,
                            &r);
  if (rv < 0) {
    mcp_grpc_stream_refuse(s, GRPC_STATUS_RESOURCE_EXHAUSTED,
                           mcp_strerror(rv));
    return;
  }
  apply(s, &r);
}

void mcp_grpc_admit_tick(mcp_grpc_ep *ep, mcp_tstamp *deadline) {
  if (ep->stopping || !ep->admit)
    return;
  mcp_admit_result r;
  while (mcp_admit_next(ep->admit, ep->now, &r)) {
    mcp_grpc_stream *s = r.user;
    if (r.verdict == MCP_ADMIT_REFUSE)
      s->ticket = NULL; /* freed by the policy */
    apply(s, &r);
  }
  mcp_tstamp at = mcp_admit_get_expiry(ep->admit);
  if (at < *deadline)
    *deadline = at;
}

void mcp_grpc_admit_check_initial(mcp_grpc_stream *s) {
  mcp_grpc_ep *ep = s->ep;
  if (!s->st || !mcp_admit_ticket_initial(s->ticket))
    return;
  if (mcp_stream_initial_sent(s->st, ep->now)) {
    mcp_admit_initial_done(ep->admit, s->ticket);
    ep->admit_dirty = 1; /* the next tick gives the slot to a waiting call */
  }
}

void mcp_grpc_admit_leave(mcp_grpc_stream *s) {
  if (s->ticket) {
    mcp_admit_release(s->ep->admit, s->ticket);
    s->ticket = NULL;
    s->ep->admit_dirty = 1; /* what it held may go to a waiting call */
  }
}
