/*
 * MCP as core definitions (mcp_v1alpha1.h "MCP as service and client
 * definitions"): its method table, which side serves which method, and
 * the mcp_service_def / mcp_client_def values through which a transport
 * runs MCP as it runs every other protocol. The transports know no MCP
 * method, service or session: this file and mcp_stream.c do.
 */
#include "codec.h"

const char *mcp_service_method(mcp_service service, int sink_dials) {
  if (!sink_dials) {
    return service == MCP_SERVICE_RESOURCE ? MCP_RESOURCE_SINK_METHOD : NULL;
  }
  switch (service) {
  case MCP_SERVICE_RESOURCE:
    return MCP_RESOURCE_SOURCE_METHOD;
  case MCP_SERVICE_AGGREGATED:
    return MCP_AGGREGATED_METHOD;
  case MCP_SERVICE_AGGREGATED_INCREMENTAL:
    return MCP_AGGREGATED_INCREMENTAL_METHOD;
  }
  return NULL;
}

size_t mcp_service_methods(unsigned which, const char *out[4]) {
  size_t n = 0;
  for (int sink_dials = 1; sink_dials >= 0; --sink_dials) {
    if (!(which & (sink_dials ? MCP_METHODS_OF_SOURCE : MCP_METHODS_OF_SINK))) {
      continue;
    }
    for (int sv = MCP_SERVICE_RESOURCE; sv <= MCP_SERVICE_AGGREGATED_INCREMENTAL;
         ++sv) {
      const char *m = mcp_service_method((mcp_service)sv, sink_dials);
      if (m) {
        out[n++] = m;
      }
    }
  }
  return n;
}

/* ---- one side ---- */

/* What each service def's user_data points at. */
typedef struct side_service {
  mcp_side *side;
  mcp_service service;
} side_service;

struct mcp_side {
  mcp_mem mem;
  const mcp_source_options *opts; /* source */
  mcp_sink_state *state;          /* sink */
  side_service ctx[3];
  mcp_service_def services[3];
  size_t nservices;
  mcp_client_def client;
  /* Dialing: MCP's reconnection (the one slot's call is the attempt;
   * mcp_stream.c tells it of each whole message the stream took). */
  mcp_redial rd;
};

/* |rd| NULL: a listening stream; else a dialed one telling |rd| what it
 * receives. */
static int open_stream(const mcp_side *side, mcp_service service,
                       mcp_redial *rd, mcp_tstamp ts, mcp_stream **pst) {
  if (side->opts) {
    return mcp__source_stream_new_counted(pst, side->opts, service, rd, ts);
  }
  return mcp__sink_stream_new_counted(pst, side->state, rd, ts);
}

static int service_open(void *user_data, const mcp_peer_info *peer,
                        mcp_tstamp ts, mcp_stream **pst) {
  MCP_UNUSED(peer);
  const side_service *c = user_data;
  return open_stream(c->side, c->service, NULL, ts, pst);
}

/* The service a dialing side speaks: a source calls ResourceSink
 * (RESOURCE); a sink the service its state was made for. */
static mcp_service dialed_service(const mcp_side *side) {
  return side->opts ? MCP_SERVICE_RESOURCE
                    : mcp_sink_state_service(side->state);
}

static const char *client_method(void *user_data, size_t slot) {
  MCP_UNUSED(slot);
  const mcp_side *side = user_data;
  return mcp_service_method(dialed_service(side), side->opts == NULL);
}

/* Open when the backoff says so; a stream that cannot be made is a
 * failed attempt all the same (paced, never a spin). */
static int client_open(void *user_data, size_t slot, mcp_tstamp ts,
                       mcp_stream **pst) {
  MCP_UNUSED(slot);
  mcp_side *side = user_data;
  if (!mcp_redial_due(&side->rd, ts)) {
    return 0;
  }
  mcp_redial_opened(&side->rd, ts);
  int rv = open_stream(side, dialed_service(side), &side->rd, ts, pst);
  if (rv < 0) {
    (void)mcp_redial_ended(&side->rd, ts);
    return 0;
  }
  return 1;
}

/* Any end, with any status, waits for the backoff; the healthy rule
 * (a message received and the call lasted) resets it. */
static void client_ended(void *user_data, size_t slot, int status,
                         const char *details, mcp_tstamp ts) {
  MCP_UNUSED(slot);
  MCP_UNUSED(status);
  MCP_UNUSED(details);
  mcp_side *side = user_data;
  if (!mcp_redial_is_open(&side->rd)) {
    return;
  }
  (void)mcp_redial_ended(&side->rd, ts);
}

static mcp_tstamp client_expiry(void *user_data) {
  const mcp_side *side = user_data;
  return mcp_redial_at(&side->rd);
}

static int side_new(mcp_side **pside, const mcp_source_options *opts,
                    mcp_sink_state *state, const mcp_mem *mem) {
  mcp_mem m;
  mcp_mem_init(&m, mem);
  mcp_side *side = mcp_mem_calloc(&m, 1, sizeof(*side));
  if (!side) {
    return MCP_ERR_NOMEM;
  }
  side->mem = m;
  side->opts = opts;
  side->state = state;
  /* A source serves the methods sinks call; a sink the one sources
   * call. */
  for (int sv = MCP_SERVICE_RESOURCE; sv <= MCP_SERVICE_AGGREGATED_INCREMENTAL;
       ++sv) {
    const char *method = mcp_service_method((mcp_service)sv, opts != NULL);
    if (!method) {
      continue;
    }
    side_service *c = &side->ctx[side->nservices];
    c->side = side;
    c->service = (mcp_service)sv;
    mcp_service_def *d = &side->services[side->nservices++];
    d->method = method;
    d->open = service_open;
    d->user_data = c;
    /* A source's first push is the whole state: it takes an initial-sync
     * slot until it went (mcp_admit_initial_sent()). */
    d->flags = opts ? MCP_DEF_INITIAL_SYNC : 0;
  }
  side->client.nslots = 1;
  side->client.method = client_method;
  side->client.open = client_open;
  side->client.ended = client_ended;
  side->client.get_expiry = client_expiry;
  side->client.user_data = side;
  /* Defaults, due at once; a dialing transport sets its options. */
  mcp_redial_init(&side->rd, NULL, NULL, NULL, 0);
  *pside = side;
  return 0;
}

int mcp_side_source_new(mcp_side **pside, const mcp_source_options *opts,
                        const mcp_mem *mem) {
  if (!pside || !opts) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  return side_new(pside, opts, NULL, mem);
}

int mcp_side_sink_new(mcp_side **pside, mcp_sink_state *state, int dialing,
                      const mcp_mem *mem) {
  /* A listening sink serves ResourceSink, which sources call for the
   * RESOURCE service only. */
  if (!pside || !state ||
      (!dialing && mcp_sink_state_service(state) != MCP_SERVICE_RESOURCE)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  return side_new(pside, NULL, state, mem);
}

void mcp_side_del(mcp_side *side) {
  if (side) {
    mcp_mem m = side->mem;
    mcp_mem_free(&m, side);
  }
}

int mcp_side_is_source(const mcp_side *side) { return side->opts != NULL; }

const mcp_service_def *mcp_side_services(const mcp_side *side, size_t *n) {
  *n = side->nservices;
  return side->services;
}

mcp_service mcp_side_service_of(const mcp_service_def *def) {
  return ((const side_service *)def->user_data)->service;
}

const mcp_client_def *mcp_side_client(const mcp_side *side) {
  return &side->client;
}

void mcp_side_set_backoff(mcp_side *side, const mcp_backoff_options *o,
                          mcp_rand_fn rand, void *rand_user_data,
                          mcp_tstamp now) {
  mcp_redial_init(&side->rd, o, rand, rand_user_data, now);
}

const mcp_redial *mcp_side_redial(const mcp_side *side) { return &side->rd; }
