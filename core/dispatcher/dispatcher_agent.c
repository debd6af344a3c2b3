/*
 * swarmkit's Dispatcher, agent side (mcp/dispatcher.h, issue 16).
 *
 * One mcp_client_def with four slots. The agent's state (session id,
 * held set, the chain's last results_in, heartbeat and retry times) lives
 * in the agent object; each call is a small stream session that sends its
 * one request and hands what it receives to the agent. When the agent
 * decides that the calls of a session must go (a session error, a broken
 * chain), it marks them and wakes them: their end() then says so.
 *
 * Assignments messages are parsed by hand (mcp_wire_field_next) so that the
 * objects' bytes reach the held set and the caller as received; each
 * object is also decoded once with protobuf-c to refuse garbage before
 * anything held changes.
 */
#include <assert.h>
#include <stddef.h>

#include "mcp/pballoc.h" /* the engine's public API only */
#include "mcp/dispatcher.h"

#include "github.com/docker/swarmkit/api/dispatcher.pb-c.h"

#define AGENT_DEFAULT_PERIOD (5 * MCP_SECONDS)
#define AGENT_DEFAULT_MAX_HELD ((size_t)1 << 20)
#define AGENT_MAX_REPORTS 1000 /* TaskStatusUpdates per call */

typedef struct held {
  char *key;      /* "<kind>/<id>" */
  const char *id; /* in key */
  int kind;
  uint8_t *obj;
  size_t len;
  int state;      /* Task: status.state as the manager sent it */
  int desired;    /* Task: desired_state */
  int at;         /* Task: the state reported (or in the call in flight) */
  int acked;      /* Task: the state the manager acknowledged */
  int own;        /* Task: |at| is this agent's (it moved the task) */
  int reassert;   /* Task: re-sent by the manager: report |at| again */
  uint64_t at_wall; /* Task: when it reached |at| (TaskStatus.timestamp) */
} held;

typedef struct acall {
  mcp_disp_agent *a;
  int slot;
  mcp_stream *st;
  int sent;
  int end;
  int status;
  char details[200];
  uint64_t received;
} acall;

struct mcp_disp_agent {
  mcp_mem mem;
  mcp_disp_agent_options o;
  char *node;
  char *session_id;
  char *results_in;
  mcp_map held;
  acall *calls[MCP_DISP_NSLOTS];
  mcp_tstamp next_heartbeat;
  mcp_tstamp period;
  int assign_done; /* Assignments ran for this session already */
  int retry_set;   /* given up on the session; redial says the next try */
  int assign_restart; /* the Assignments call was ended for a new id */
  int report_dirty;
  int report_retry; /* a report failed: again at the next heartbeat */
  mcp_redial rd;   /* the Session call is the attempt */
  mcp_msg_builder *b;
  mcp_client_def def;
  mcp_disp_agent_stats stats;
};

static const char *const slot_paths[MCP_DISP_NSLOTS] = {
    MCP_DISP_METHOD_SESSION, MCP_DISP_METHOD_HEARTBEAT,
    MCP_DISP_METHOD_ASSIGNMENTS, MCP_DISP_METHOD_UPDATE_TASK_STATUS};

static const size_t agent_opt_sizes[] = {
    0, offsetof(mcp_disp_agent_options, wall_offset),
    sizeof(mcp_disp_agent_options)};
#define AGENT_OPT_VN (sizeof agent_opt_sizes / sizeof agent_opt_sizes[0])

static void agent_options_default(mcp_disp_agent_options *o) {
  memset(o, 0, sizeof *o);
  o->report_state = -1;
  o->heartbeat_period = AGENT_DEFAULT_PERIOD;
  o->max_held = AGENT_DEFAULT_MAX_HELD;
}

void mcp_disp_agent_options_default_versioned(int version,
                                              mcp_disp_agent_options *opts) {
  mcp_disp_agent_options o;
  agent_options_default(&o);
  memcpy(opts, &o, mcp_vstruct_size(version, agent_opt_sizes, AGENT_OPT_VN));
}

static void held_free(mcp_disp_agent *a, held *h) {
  if (h) {
    mcp_mem_free(&a->mem, h->key);
    mcp_mem_free(&a->mem, h->obj);
    mcp_mem_free(&a->mem, h);
  }
}

static void held_clear(mcp_disp_agent *a, mcp_map *m) {
  void *v;
  for (size_t i = 0; mcp_map_iter(m, &i, &v);) {
    held_free(a, v);
  }
  mcp_map_free(m, &a->mem);
}

/* ------------------------------------------------------------------ */
/* Session state                                                       */
/* ------------------------------------------------------------------ */

static void call_end(acall *c, int status, const char *details) {
  if (c && !c->end) {
    c->end = 1;
    c->status = status;
    mcp_fmt(c->details, sizeof c->details, "%s", details);
    if (c->st) {
      mcp_stream_wake(c->st);
    }
  }
}

/* The session is gone (an error, a refusal, a broken chain): every call
 * of it ends, and a new Session is opened after the backoff. */
static void lose_session(mcp_disp_agent *a, mcp_tstamp ts, const char *why) {
  acall *sc = a->calls[MCP_DISP_SLOT_SESSION];
  if (a->retry_set) {
    /* Already given up (the calls ending now are the ones it ended):
     * the backoff counts one failure, not one per call. */
    for (int i = 0; i < MCP_DISP_NSLOTS; ++i) {
      call_end(a->calls[i], MCP_CODE_CANCELLED, why);
    }
    return;
  }
  if (sc) {
    mcp_redial_received(&a->rd, sc->received);
  }
  if (a->session_id || sc) {
    a->stats.session_errors++;
  }
  mcp_mem_free(&a->mem, a->session_id);
  a->session_id = NULL;
  a->assign_done = 0;
  for (int i = 0; i < MCP_DISP_NSLOTS; ++i) {
    call_end(a->calls[i], MCP_CODE_CANCELLED, why);
  }
  (void)mcp_redial_ended(&a->rd, ts);
  a->retry_set = 1;
}

/* ------------------------------------------------------------------ */
/* Requests                                                            */
/* ------------------------------------------------------------------ */

static int build_session_id_req(mcp_disp_agent *a, mcp_msg **pmsg) {
  const char *sid = a->session_id ? a->session_id : "";
  mcp_msg_builder_len_field(a->b, 1, sid, strlen(sid));
  return mcp_msg_builder_finish(a->b, NULL, pmsg);
}

static int build_session_req(mcp_disp_agent *a, mcp_msg **pmsg) {
  /* SessionRequest{description = 1 {hostname = 1}}: always a new
   * session (swarmkit's agent never reuses an id). */
  size_t n = strlen(a->node);
  mcp_msg_builder_key(a->b, 1, MCP_WT_LEN);
  mcp_msg_builder_varint(a->b, mcp_wire_len_field_size(n));
  mcp_msg_builder_len_field(a->b, 1, a->node, n);
  return mcp_msg_builder_finish(a->b, NULL, pmsg);
}

/* swarmkit's TaskState values the controller walks through. */
enum {
  TS_ASSIGNED = 192,
  TS_ACCEPTED = 256,
  TS_PREPARING = 320,
  TS_READY = 384,
  TS_STARTING = 448,
  TS_RUNNING = 512,
  TS_COMPLETE = 576,
  TS_SHUTDOWN = 640
};

/* The message the controller gives the state it moves a task to
 * (agent/exec/controller.go Do, :230-330). */
static const char *state_message(int state) {
  switch (state) {
  case TS_ACCEPTED:
    return "accepted";
  case TS_PREPARING:
    return "preparing";
  case TS_READY:
    return "prepared";
  case TS_STARTING:
    return "starting";
  case TS_RUNNING:
    return "started";
  case TS_COMPLETE:
    return "finished";
  case TS_SHUTDOWN:
    return "shutdown";
  default:
    return "";
  }
}

/* The next state swarmkit's controller (agent/exec/controller.go Do,
 * :230-330) moves a task in |state| with |desired| to (its message:
 * state_message()); 0 when it stays. A fake executor whose every step
 * succeeds: Prepare, Start, and Wait (to COMPLETE) only up to |target|. */
static int next_state(int state, int desired, int target) {
  int next = 0;
  if (desired >= TS_SHUTDOWN) {
    return state >= TS_COMPLETE ? 0 : TS_SHUTDOWN;
  }
  if (state > desired) {
    return 0; /* way beyond desired state, pause */
  }
  /* The states that may proceed past desired. */
  if (state == TS_PREPARING) {
    next = TS_READY;
  } else if (state == TS_STARTING) {
    next = TS_RUNNING;
  } else if (state == TS_RUNNING) {
    next = TS_COMPLETE;
  } else if (state >= desired) {
    return 0;
  } else if (state <= TS_ASSIGNED) {
    next = TS_ACCEPTED;
  } else if (state == TS_ACCEPTED) {
    next = TS_PREPARING;
  } else if (state == TS_READY) {
    next = TS_STARTING;
  }
  return next && next <= target ? next : 0;
}

static size_t status_len(uint64_t secs, uint64_t nanos, uint64_t state,
                         size_t ml, size_t *tl) {
  *tl = (secs ? 1 + mcp_wire_varint_len(secs) : 0) +
        (nanos ? 1 + mcp_wire_varint_len(nanos) : 0);
  return mcp_wire_len_field_size(*tl) + 1 + mcp_wire_varint_len(state) +
         mcp_wire_len_field_size(ml);
}

static int build_uts_req(mcp_disp_agent *a, mcp_tstamp ts, mcp_msg **pmsg) {
  /* UpdateTaskStatusRequest{session_id = 1, updates = 3 {task_id = 1,
   * status = 2 TaskStatus{timestamp = 1, state = 2, message = 3}}}: each
   * held task moves one state, as the controller's Do, with the time it
   * did; the next call carries the next state (swarmkit's agent reports
   * every transition, not only the last). */
  void *v;
  size_t n = 0;
  uint64_t now = ts + (uint64_t)a->o.wall_offset;
  int more = 0;
  mcp_msg_builder_len_field(a->b, 1, a->session_id, strlen(a->session_id));
  for (size_t i = 0; mcp_map_iter(&a->held, &i, &v);) {
    held *h = v;
    const char *msg;
    uint64_t wall = now, secs, nanos;
    int next;
    size_t il, sl, tl, ml;
    if (h->kind != MCP_DISP_TASK) {
      continue;
    }
    next = next_state(h->at, h->desired, a->o.report_state);
    if (!next && h->reassert) {
      /* The manager re-sent the task and the controller had nothing new:
       * its status as it stands, with the time it was reached (the task
       * manager reports what Do returns, agent/task.go:140). */
      next = h->at;
      wall = h->at_wall;
    }
    if (!next) {
      continue;
    }
    if (n == AGENT_MAX_REPORTS) {
      more = 1; /* the rest with the next call */
      break;
    }
    secs = wall / MCP_SECONDS;
    nanos = wall % MCP_SECONDS;
    il = strlen(h->id);
    msg = state_message(next);
    ml = strlen(msg);
    sl = status_len(secs, nanos, (uint64_t)next, ml, &tl);
    mcp_msg_builder_key(a->b, 3, MCP_WT_LEN);
    mcp_msg_builder_varint(a->b, mcp_wire_len_field_size(il) +
                                     mcp_wire_len_field_size(sl));
    mcp_msg_builder_len_field(a->b, 1, h->id, il);
    mcp_msg_builder_key(a->b, 2, MCP_WT_LEN);
    mcp_msg_builder_varint(a->b, sl);
    mcp_msg_builder_key(a->b, 1, MCP_WT_LEN);
    mcp_msg_builder_varint(a->b, tl);
    if (secs) {
      mcp_msg_builder_key(a->b, 1, MCP_WT_VARINT);
      mcp_msg_builder_varint(a->b, secs);
    }
    if (nanos) {
      mcp_msg_builder_key(a->b, 2, MCP_WT_VARINT);
      mcp_msg_builder_varint(a->b, nanos);
    }
    mcp_msg_builder_key(a->b, 2, MCP_WT_VARINT);
    mcp_msg_builder_varint(a->b, (uint64_t)next);
    mcp_msg_builder_len_field(a->b, 3, msg, ml);
    if (next != h->at) {
      h->at = next; /* acknowledged when the call ends OK (ended()) */
      h->at_wall = wall;
      h->own = 1;
    }
    h->reassert = 0;
    if (next_state(next, h->desired, a->o.report_state)) {
      more = 1;
    }
    ++n;
  }
  a->report_dirty = more;
  a->stats.status_reports += n;
  return mcp_msg_builder_finish(a->b, NULL, pmsg);
}

/* Whether any held task has a state to report. */
static int reports_due(const mcp_disp_agent *a) {
  void *v;
  if (a->o.report_state < 0) {
    return 0;
  }
  for (size_t i = 0; mcp_map_iter(&a->held, &i, &v);) {
    const held *h = v;
    if (h->kind == MCP_DISP_TASK &&
        (h->reassert ||
         next_state(h->at, h->desired, a->o.report_state))) {
      return 1;
    }
  }
  return 0;
}

/* The UpdateTaskStatus call ended: what it carried is acknowledged (OK)
 * or goes again (an error). */
static void reports_settle(mcp_disp_agent *a, int ok) {
  void *v;
  for (size_t i = 0; mcp_map_iter(&a->held, &i, &v);) {
    held *h = v;
    if (ok) {
      h->acked = h->at;
    } else {
      h->at = h->acked;
    }
  }
}

/* ------------------------------------------------------------------ */
/* Assignments                                                         */
/* ------------------------------------------------------------------ */

typedef struct pchange {
  int action;
  int kind;
  char *id;               /* in the id arena */
  const uint8_t *obj;     /* in the input */
  size_t len;
  int state;
  int desired;
} pchange;

/* The id (field 1) of an encoded Task/Secret/Config. */
static int object_id(const uint8_t *p, size_t n, const uint8_t **id,
                     size_t *idlen) {
  mcp_wire w = {p, p + n};
  mcp_wire_field fd;
  int r;
  *id = NULL;
  *idlen = 0;
  while ((r = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.num == 1 && fd.wt == MCP_WT_LEN) {
      *id = fd.data;
      *idlen = fd.len;
    }
  }
  return r;
}

static const ProtobufCMessageDescriptor *kind_desc(int kind) {
  switch (kind) {
  case MCP_DISP_TASK:
    return &docker__swarmkit__v1__task__descriptor;
  case MCP_DISP_SECRET:
    return &docker__swarmkit__v1__secret__descriptor;
  default:
    return &docker__swarmkit__v1__config__descriptor;
  }
}

/* Decodes the object once: garbage is refused before anything changes;
 * a task's status.state is kept for reporting. */
static int object_check(mcp_disp_agent *a, pchange *c, const char **why) {
  mcp_pballoc pa;
  ProtobufCMessage *m;
  mcp_pballoc_init(&pa, &a->mem);
  m = protobuf_c_message_unpack(kind_desc(c->kind), &pa.a, c->len, c->obj);
  if (!m) {
    *why = "an object that does not decode as its type";
    return pa.failed ? MCP_ERR_NOMEM : MCP_ERR_MALFORMED;
  }
  if (c->kind == MCP_DISP_TASK) {
    Docker__Swarmkit__V1__Task *t = (Docker__Swarmkit__V1__Task *)m;
    c->state = t->status ? (int)t->status->state : 0;
    c->desired = (int)t->desired_state;
  }
  protobuf_c_message_free_unpacked(m, &pa.a);
  return 0;
}

typedef struct parsed {
  int type;
  const uint8_t *applies_to, *results_in;
  size_t applies_len, results_len;
  pchange *ch;
  size_t n;
  char *ids; /* arena of NUL-terminated ids */
  const char *why; /* MALFORMED: what */
} parsed;

static void parsed_free(mcp_disp_agent *a, parsed *p) {
  mcp_mem_free(&a->mem, p->ch);
  mcp_mem_free(&a->mem, p->ids);
}

/* One AssignmentChange: |*kind| 0 for an item this agent does not hold
 * (a volume): skipped. */
static int parse_change(const uint8_t *p, size_t n, pchange *c,
                        const uint8_t **id, size_t *idlen, const char **why) {
  mcp_wire w = {p, p + n};
  mcp_wire_field fd;
  int r;
  const uint8_t *asg = NULL;
  size_t asgl = 0;
  c->action = MCP_DISP_UPDATE;
  c->kind = 0;
  c->obj = NULL;
  c->len = 0;
  while ((r = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.num == 1 && fd.wt == MCP_WT_LEN) {
      asg = fd.data;
      asgl = fd.len;
    } else if (fd.num == 2 && fd.wt == MCP_WT_VARINT) {
      if (fd.v > MCP_DISP_REMOVE) {
        *why = "an unknown action";
        return MCP_ERR_MALFORMED;
      }
      c->action = (int)fd.v;
    }
  }
  if (r < 0 || !asg) {
    *why = r < 0 ? "a change that does not decode" : "a change without assignment";
    return MCP_ERR_MALFORMED;
  }
  w.p = asg;
  w.end = asg + asgl;
  while ((r = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.wt != MCP_WT_LEN) {
      continue;
    }
    if (fd.num >= MCP_DISP_TASK && fd.num <= MCP_DISP_CONFIG) {
      c->kind = (int)fd.num; /* a oneof: the last one wins */
      c->obj = fd.data;
      c->len = fd.len;
    } else if (fd.num == 4) {
      c->kind = 0; /* VolumeAssignment: not held */
    }
  }
  if (r < 0) {
    *why = "an assignment that does not decode";
    return MCP_ERR_MALFORMED;
  }
  if (!c->kind) {
    return 0;
  }
  r = object_id(c->obj, c->len, id, idlen);
  /* Ids are keys here: bounded, UTF-8, not empty. */
  if (r < 0 || !*id || !*idlen || *idlen > 1024 ||
      !mcp_utf8_valid(*id, *idlen, 0)) {
    *why = r < 0 ? "an object that does not decode"
                 : "an object without a valid id (1 to 1024 bytes of UTF-8)";
    return MCP_ERR_MALFORMED;
  }
  return 0;
}

static int parse_msg(mcp_disp_agent *a, const uint8_t *in, size_t len,
                     parsed *p) {
  mcp_wire w = {in, in + len};
  mcp_wire_field fd;
  int r;
  size_t nch = 0, idbytes = 0, off = 0;
  memset(p, 0, sizeof *p);
  p->applies_to = p->results_in = (const uint8_t *)"";
  /* Pass 1: header fields and the number of changes. */
  while ((r = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.num == 1 && fd.wt == MCP_WT_VARINT) {
      if (fd.v > MCP_DISP_INCREMENTAL) {
        p->why = "an unknown type";
        return MCP_ERR_MALFORMED;
      }
      p->type = (int)fd.v;
    } else if (fd.num == 2 && fd.wt == MCP_WT_LEN) {
      p->applies_to = fd.data;
      p->applies_len = fd.len;
    } else if (fd.num == 3 && fd.wt == MCP_WT_LEN) {
      p->results_in = fd.data;
      p->results_len = fd.len;
    } else if (fd.num == 4 && fd.wt == MCP_WT_LEN) {
      ++nch;
      idbytes += fd.len + 1; /* an id is shorter than its change */
    }
  }
  if (r < 0 || !mcp_utf8_valid(p->applies_to, p->applies_len, 0) ||
      !mcp_utf8_valid(p->results_in, p->results_len, 0)) {
    p->why = r < 0 ? "bytes that do not decode"
                   : "applies_to or results_in not UTF-8";
    return MCP_ERR_MALFORMED;
  }
  if (nch) {
    p->ch = mcp_mem_calloc(&a->mem, nch, sizeof *p->ch);
    p->ids = mcp_mem_malloc(&a->mem, idbytes);
    if (!p->ch || !p->ids) {
      parsed_free(a, p);
      return MCP_ERR_NOMEM;
    }
  }
  /* Pass 2: the changes. */
  w.p = in;
  while ((r = mcp_wire_field_next(&w, &fd)) == 1) {
    const uint8_t *id;
    size_t idlen;
    pchange *c;
    if (fd.num != 4 || fd.wt != MCP_WT_LEN) {
      continue;
    }
    c = &p->ch[p->n]; /* p->ch exists: pass 1 counted this change */
    r = parse_change(fd.data, fd.len, c, &id, &idlen, &p->why);
    if (!r && c->kind && c->action == MCP_DISP_UPDATE) {
      r = object_check(a, c, &p->why);
    }
    if (r) {
      const char *why = p->why;
      parsed_free(a, p);
      p->why = why;
      return r;
    }
    if (!c->kind) {
      continue;
    }
    c->id = p->ids + off;
    memcpy(c->id, id, idlen);
    c->id[idlen] = 0;
    off += idlen + 1;
    if (c->action == MCP_DISP_REMOVE) {
      c->obj = NULL;
      c->len = 0;
    }
    p->n++;
  }
  return 0;
}

static held *held_new(mcp_disp_agent *a, const pchange *c) {
  const char *kn = mcp_disp_kind_name(c->kind);
  size_t kl = strlen(kn), il = strlen(c->id);
  held *h = mcp_mem_calloc(&a->mem, 1, sizeof *h);
  if (!h) {
    return NULL;
  }
  h->key = mcp_mem_malloc(&a->mem, kl + 1 + il + 1);
  h->obj = mcp_mem_malloc(&a->mem, c->len ? c->len : 1);
  if (!h->key || !h->obj) {
    held_free(a, h);
    return NULL;
  }
  memcpy(h->key, kn, kl);
  h->key[kl] = '/';
  memcpy(h->key + kl + 1, c->id, il + 1);
  h->id = h->key + kl + 1;
  h->kind = c->kind;
  if (c->len) {
    memcpy(h->obj, c->obj, c->len);
  }
  h->len = c->len;
  h->state = c->state;
  h->desired = c->desired;
  h->at = h->acked = c->state;
  return h;
}

static void held_key(char *buf, size_t n, int kind, const char *id) {
  mcp_fmt(buf, n, "%s/%s", mcp_disp_kind_name(kind), id);
}

/* Applies a parsed message: all or nothing. |chained| 0: a message that
 * did not chain, applied as swarmkit's agent does, but the chain's last
 * results_in stays (session.go watch: streamReference). */
static int apply(mcp_disp_agent *a, const parsed *p, int chained) {
  held **fresh = NULL;
  size_t nup = 0, nnew = 0;
  char *res;
  mcp_map complete = {0};
  mcp_map *m = p->type == MCP_DISP_COMPLETE ? &complete : &a->held;
  int err = 0;
  res = chained ? mcp_mem_strndup(&a->mem, (const char *)p->results_in,
                               p->results_len)
                : mcp_mem_strdup(&a->mem, a->results_in);
  if (!res) {
    return MCP_ERR_NOMEM;
  }
  if (p->n) {
    fresh = mcp_mem_calloc(&a->mem, p->n, sizeof *fresh);
    if (!fresh) {
      err = MCP_ERR_NOMEM;
    }
  }
  for (size_t i = 0; !err && i < p->n; ++i) {
    const pchange *c = &p->ch[i];
    if (c->action != MCP_DISP_UPDATE) {
      continue;
    }
    fresh[i] = held_new(a, c);
    if (!fresh[i]) {
      err = MCP_ERR_NOMEM;
      break;
    }
    ++nup;
    if (!mcp_map_get(m, fresh[i]->key)) {
      ++nnew;
    }
  }
  if (!err && m->n + nnew > a->o.max_held) {
    err = MCP_ERR_LIMIT;
  }
  if (!err && mcp_map_reserve(m, &a->mem, nup)) {
    err = MCP_ERR_NOMEM;
  }
  if (err) {
    for (size_t i = 0; fresh && i < p->n; ++i) {
      held_free(a, fresh[i]);
    }
    mcp_mem_free(&a->mem, fresh);
    mcp_map_free(&complete, &a->mem);
    mcp_mem_free(&a->mem, res);
    return err;
  }
  /* Nothing can fail from here on. */
  for (size_t i = 0; i < p->n; ++i) {
    const pchange *c = &p->ch[i];
    if (c->action == MCP_DISP_UPDATE) {
      const held *old = mcp_map_get(&a->held, fresh[i]->key);
      if (old && old->kind == MCP_DISP_TASK && old->own) {
        /* The status the agent gave a task is canonical: the manager's
         * copy of it does not replace it (agent/task.go:205); the task
         * is reported again when nothing else moves it. */
        fresh[i]->at = old->at;
        fresh[i]->acked = old->acked;
        fresh[i]->at_wall = old->at_wall;
        fresh[i]->own = 1;
        fresh[i]->reassert = a->o.report_state >= 0;
      }
      held_free(a, mcp_map_put(m, &a->mem, fresh[i]->key, fresh[i], NULL));
      if (c->kind == MCP_DISP_TASK) {
        a->report_dirty = 1;
      }
    } else {
      char key[1200];
      held_key(key, sizeof key, c->kind, c->id);
      held_free(a, mcp_map_del(m, key));
    }
  }
  mcp_mem_free(&a->mem, fresh);
  if (p->type == MCP_DISP_COMPLETE) {
    held_clear(a, &a->held);
    a->held = complete;
    a->stats.completes++;
  }
  mcp_mem_free(&a->mem, a->results_in);
  a->results_in = res;
  a->stats.messages++;
  return 0;
}

static int assign_recv(acall *c, const uint8_t *in, size_t len,
                       mcp_tstamp ts) {
  mcp_disp_agent *a = c->a;
  parsed p;
  int r;
  MCP_UNUSED(ts);
  r = parse_msg(a, in, len, &p);
  if (r == MCP_ERR_MALFORMED) {
    /* Said plainly, and the stream ends: nothing held changed. */
    a->stats.malformed++;
    c->end = 1;
    c->status = mcp_error_grpc_status(MCP_ERR_MALFORMED);
    mcp_fmt(c->details, sizeof c->details,
             "malformed AssignmentsMessage: %s", p.why ? p.why : "?");
    return 0;
  }
  if (r) {
    return r;
  }
  int chained = p.type != MCP_DISP_INCREMENTAL ||
                (p.applies_len == strlen(a->results_in) &&
                 memcmp(p.applies_to, a->results_in, p.applies_len) == 0);
  if (!chained) {
    /* A message was missed. swarmkit's agent (session.go:352) hands this
     * one to the worker all the same and calls Assignments again at once
     * on the same session, whose COMPLETE then sets everything right. */
    char got[64];
    size_t gl = p.applies_len < 63 ? p.applies_len : 63;
    a->stats.chain_mismatches++;
    memcpy(got, p.applies_to, gl);
    got[gl] = 0;
    c->end = 1;
    c->status = MCP_CODE_CANCELLED;
    mcp_fmt(c->details, sizeof c->details,
             "assignments gap: applies_to \"%s\", last results_in \"%s\"; "
             "calling Assignments again",
             got, a->results_in);
    a->assign_restart = 1;
  }
  r = apply(a, &p, chained);
  if (r) {
    parsed_free(a, &p);
    return r;
  }
  if (a->o.on_message) {
    mcp_disp_change *ch = NULL;
    mcp_disp_event ev;
    char ap[128];
    size_t al = p.applies_len < sizeof ap - 1 ? p.applies_len : sizeof ap - 1;
    memcpy(ap, p.applies_to, al);
    ap[al] = 0;
    if (p.n) {
      ch = mcp_mem_calloc(&a->mem, p.n, sizeof *ch);
    }
    if (ch || !p.n) {
      for (size_t i = 0; i < p.n; ++i) {
        ch[i].action = p.ch[i].action;
        ch[i].kind = p.ch[i].kind;
        ch[i].id = p.ch[i].id;
        ch[i].object = p.ch[i].obj;
        ch[i].object_len = p.ch[i].len;
      }
      ev.type = p.type;
      ev.applies_to = ap;
      ev.results_in = a->results_in;
      ev.changes = ch;
      ev.nchanges = p.n;
      ev.total = a->held.n;
      a->o.on_message(&ev, a->o.user_data);
      mcp_mem_free(&a->mem, ch);
    } else {
      r = MCP_ERR_NOMEM; /* applied, but the caller could not hear it */
    }
  }
  parsed_free(a, &p);
  return r;
}

/* ------------------------------------------------------------------ */
/* Call streams                                                        */
/* ------------------------------------------------------------------ */

static int acall_recv(void *sess, const uint8_t *in, size_t len,
                      mcp_tstamp ts) {
  acall *c = sess;
  mcp_disp_agent *a = c->a;
  mcp_pballoc pa;
  c->received++;
  if (c->end) {
    return 0; /* ending: what still arrives is dropped */
  }
  mcp_pballoc_init(&pa, &a->mem);
  switch (c->slot) {
  case MCP_DISP_SLOT_SESSION: {
    Docker__Swarmkit__V1__SessionMessage *m =
        docker__swarmkit__v1__session_message__unpack(&pa.a, len, in);
    int r = 0;
    if (!m) {
      return pa.failed ? MCP_ERR_NOMEM : MCP_ERR_MALFORMED;
    }
    if (!m->session_id || !*m->session_id || !mcp_str_valid(m->session_id)) {
      r = MCP_ERR_MALFORMED;
    } else if (!a->session_id || strcmp(a->session_id, m->session_id) != 0) {
      char *sid = mcp_mem_strdup(&a->mem, m->session_id);
      if (!sid) {
        r = MCP_ERR_NOMEM;
      } else {
        if (a->session_id) {
          /* The manager changed the id: the old calls are stale, but the
           * session goes on (ended() reopens Assignments). */
          if (a->calls[MCP_DISP_SLOT_ASSIGNMENTS]) {
            a->assign_restart = 1;
          }
          call_end(a->calls[MCP_DISP_SLOT_ASSIGNMENTS], MCP_CODE_CANCELLED,
                   "session id changed");
          call_end(a->calls[MCP_DISP_SLOT_HEARTBEAT], MCP_CODE_CANCELLED,
                   "session id changed");
        }
        mcp_mem_free(&a->mem, a->session_id);
        a->session_id = sid;
        a->assign_done = 0;
        a->next_heartbeat = ts; /* at once, to learn the period */
        a->report_dirty = 1;
        a->stats.sessions++;
      }
    }
    docker__swarmkit__v1__session_message__free_unpacked(m, &pa.a);
    return r;
  }
  case MCP_DISP_SLOT_HEARTBEAT: {
    Docker__Swarmkit__V1__HeartbeatResponse *m =
        docker__swarmkit__v1__heartbeat_response__unpack(&pa.a, len, in);
    if (!m) {
      return pa.failed ? MCP_ERR_NOMEM : MCP_ERR_MALFORMED;
    }
    if (m->period && m->period->seconds >= 0 && m->period->nanos >= 0 &&
        (m->period->seconds || m->period->nanos) &&
        m->period->seconds < 86400 * 365) {
      a->period = (mcp_tstamp)m->period->seconds * MCP_SECONDS +
                  (mcp_tstamp)m->period->nanos;
    }
    a->next_heartbeat = ts + a->period;
    a->stats.heartbeats++;
    if (a->report_retry) {
      a->report_retry = 0;
      a->report_dirty = 1;
    }
    docker__swarmkit__v1__heartbeat_response__free_unpacked(m, &pa.a);
    return 0;
  }
  case MCP_DISP_SLOT_ASSIGNMENTS:
    return assign_recv(c, in, len, ts);
  default: /* UpdateTaskStatusResponse: empty */
    return 0;
  }
}

static int acall_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  acall *c = sess;
  mcp_disp_agent *a = c->a;
  int r;
  if (c->sent || c->end) {
    return 0;
  }
  switch (c->slot) {
  case MCP_DISP_SLOT_SESSION:
    r = build_session_req(a, pmsg);
    break;
  case MCP_DISP_SLOT_UPDATE_TASK_STATUS:
    r = build_uts_req(a, ts, pmsg);
    break;
  default:
    r = build_session_id_req(a, pmsg);
    break;
  }
  if (r) {
    return r;
  }
  c->sent = 1;
  return 1;
}

static int acall_end(const void *sess, int *status, const char **details) {
  const acall *c = sess;
  if (c->end) {
    *status = c->status;
    *details = c->details;
    return 1;
  }
  return 0;
}

static void acall_del(void *sess) {
  acall *c = sess;
  mcp_disp_agent *a = c->a;
  if (a->calls[c->slot] == c) {
    a->calls[c->slot] = NULL;
  }
  mcp_mem_free(&a->mem, c);
}

/* One ops per slot: the name is what logs and metrics show (the method,
 * as the manager's streams are named). */
#define ACALL_OPS(NAME)                                                      \
  {NAME, MCP_STREAM_CLIENT_HALF_CLOSE_AFTER_FIRST, acall_recv, acall_next,    \
   NULL, NULL, acall_end, NULL, acall_del, NULL, NULL}
static const mcp_stream_ops acall_ops[MCP_DISP_NSLOTS] = {
    ACALL_OPS("session"), ACALL_OPS("heartbeat"), ACALL_OPS("assignments"),
    ACALL_OPS("update_task_status")};

/* ------------------------------------------------------------------ */
/* Client def                                                          */
/* ------------------------------------------------------------------ */

static const char *def_method(void *user_data, size_t slot) {
  MCP_UNUSED(user_data);
  return slot < MCP_DISP_NSLOTS ? slot_paths[slot] : NULL;
}

static int want_open(const mcp_disp_agent *a, size_t slot, mcp_tstamp ts) {
  if (a->calls[slot]) {
    return 0;
  }
  switch (slot) {
  case MCP_DISP_SLOT_SESSION:
    return mcp_redial_due(&a->rd, ts);
  case MCP_DISP_SLOT_HEARTBEAT:
    return a->session_id && ts >= a->next_heartbeat;
  case MCP_DISP_SLOT_ASSIGNMENTS:
    return a->session_id && !a->assign_done;
  case MCP_DISP_SLOT_UPDATE_TASK_STATUS:
    return a->session_id && a->o.report_state >= 0 && a->report_dirty &&
           reports_due(a);
  default:
    return 0;
  }
}

static int def_open(void *user_data, size_t slot, mcp_tstamp ts,
                    mcp_stream **pst) {
  mcp_disp_agent *a = user_data;
  acall *c;
  mcp_stream *st;
  if (slot >= MCP_DISP_NSLOTS || !want_open(a, slot, ts)) {
    return 0;
  }
  c = mcp_mem_calloc(&a->mem, 1, sizeof *c);
  if (!c) {
    return 0; /* asked again after the next event */
  }
  c->a = a;
  c->slot = (int)slot;
  if (mcp_stream_new(&st, &acall_ops[slot], c, &a->mem, ts)) {
    return 0; /* acall_del freed |c| */
  }
  c->st = st;
  a->calls[slot] = c;
  if (slot == MCP_DISP_SLOT_SESSION) {
    a->retry_set = 0;
    mcp_redial_opened(&a->rd, ts);
  } else if (slot == MCP_DISP_SLOT_HEARTBEAT) {
    /* Not again before the period, even when this one dies silently. */
    a->next_heartbeat = ts + a->period;
  } else if (slot == MCP_DISP_SLOT_ASSIGNMENTS) {
    a->assign_done = 1;
  }
  *pst = st;
  return 1;
}

static void def_ended(void *user_data, size_t slot, int status,
                      const char *details, mcp_tstamp ts) {
  mcp_disp_agent *a = user_data;
  MCP_UNUSED(details);
  switch (slot) {
  case MCP_DISP_SLOT_SESSION:
    /* The session stream is the session: without it, a new one. */
    lose_session(a, ts, "session ended");
    break;
  case MCP_DISP_SLOT_HEARTBEAT:
  case MCP_DISP_SLOT_UPDATE_TASK_STATUS:
    if (slot == MCP_DISP_SLOT_UPDATE_TASK_STATUS) {
      /* Not delivered: the same states again, at the next heartbeat (a
       * refusal retried at once would spin). */
      reports_settle(a, status == MCP_CODE_OK);
      if (status != MCP_CODE_OK) {
        a->report_dirty = 0;
        a->report_retry = 1;
      }
    }
    if (status == MCP_CODE_INVALID_ARGUMENT ||
        status == MCP_CODE_NOT_FOUND) {
      /* swarmkit's "session invalid" and "node not registered". */
      lose_session(a, ts, "session invalid");
    }
    break;
  case MCP_DISP_SLOT_ASSIGNMENTS:
    if (a->assign_restart) {
      a->assign_restart = 0;
      a->assign_done = 0; /* again, with the new id */
      break;
    }
    /* The stream is meant to last: its end (a broken chain, a refusal,
     * the session gone) means a new session. */
    lose_session(a, ts, "assignments ended");
    break;
  default:
    break;
  }
}

static mcp_tstamp def_get_expiry(void *user_data) {
  mcp_disp_agent *a = user_data;
  mcp_tstamp t = MCP_TSTAMP_MAX;
  if (!a->calls[MCP_DISP_SLOT_SESSION] && mcp_redial_at(&a->rd) < t) {
    t = mcp_redial_at(&a->rd);
  }
  if (a->session_id && !a->calls[MCP_DISP_SLOT_HEARTBEAT] &&
      a->next_heartbeat < t) {
    t = a->next_heartbeat;
  }
  return t;
}

/* ------------------------------------------------------------------ */
/* Agent object                                                        */
/* ------------------------------------------------------------------ */

int mcp_disp_agent_new_versioned(mcp_disp_agent **pa, int version,
                                 const mcp_disp_agent_options *opts,
                                 mcp_tstamp ts) {
  mcp_disp_agent_options o;
  mcp_mem mem;
  mcp_disp_agent *a;
  if (!pa || !opts || !mcp_vstruct_known(version, AGENT_OPT_VN)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  agent_options_default(&o);
  memcpy(&o, opts, mcp_vstruct_size(version, agent_opt_sizes, AGENT_OPT_VN));
  if (!o.node_id || !*o.node_id || !mcp_str_valid(o.node_id)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  o.heartbeat_period = o.heartbeat_period ? o.heartbeat_period
                                          : AGENT_DEFAULT_PERIOD;
  o.max_held = mcp_limit_or(o.max_held, AGENT_DEFAULT_MAX_HELD);
  mcp_mem_init(&mem, o.mem);
  a = mcp_mem_calloc(&mem, 1, sizeof *a);
  if (!a) {
    return MCP_ERR_NOMEM;
  }
  a->mem = mem;
  a->o = o;
  a->o.mem = &a->mem;
  a->node = mcp_mem_strdup(&mem, o.node_id);
  a->results_in = mcp_mem_strdup(&mem, "");
  if (!a->node || !a->results_in || mcp_msg_builder_new(&a->b, &a->mem)) {
    mcp_disp_agent_del(a);
    return MCP_ERR_NOMEM;
  }
  a->o.node_id = a->node;
  a->period = o.heartbeat_period;
  mcp_redial_init(&a->rd, &o.backoff, o.rand, o.rand_user_data, ts);
  a->def.nslots = MCP_DISP_NSLOTS;
  a->def.method = def_method;
  a->def.open = def_open;
  a->def.ended = def_ended;
  a->def.get_expiry = def_get_expiry;
  a->def.user_data = a;
  *pa = a;
  return 0;
}

void mcp_disp_agent_del(mcp_disp_agent *a) {
  if (!a) {
    return;
  }
  for (int i = 0; i < MCP_DISP_NSLOTS; ++i) {
    assert(!a->calls[i]);
  }
  held_clear(a, &a->held);
  mcp_mem_free(&a->mem, a->node);
  mcp_mem_free(&a->mem, a->session_id);
  mcp_mem_free(&a->mem, a->results_in);
  mcp_msg_builder_del(a->b);
  mcp_mem_free(&a->mem, a);
}

const mcp_client_def *mcp_disp_agent_client_def(mcp_disp_agent *a) {
  return &a->def;
}

const char *mcp_disp_agent_session_id(const mcp_disp_agent *a) {
  return a->session_id;
}

const char *mcp_disp_agent_results_in(const mcp_disp_agent *a) {
  return a->results_in;
}

mcp_tstamp mcp_disp_agent_period(const mcp_disp_agent *a) {
  return a->period;
}

size_t mcp_disp_agent_count(const mcp_disp_agent *a) { return a->held.n; }

int mcp_disp_agent_get(const mcp_disp_agent *a, int kind, const char *id,
                       const uint8_t **object, size_t *len) {
  char key[1200];
  const held *h;
  if (!mcp_disp_kind_name(kind) || !id) {
    return 0;
  }
  held_key(key, sizeof key, kind, id);
  h = mcp_map_get(&a->held, key);
  if (!h) {
    return 0;
  }
  *object = h->obj;
  *len = h->len;
  return 1;
}

int mcp_disp_agent_foreach(const mcp_disp_agent *a, mcp_disp_held_fn fn,
                           void *user_data) {
  void *v;
  for (size_t i = 0; mcp_map_iter(&a->held, &i, &v);) {
    const held *h = v;
    mcp_disp_change c = {MCP_DISP_UPDATE, h->kind, h->id, h->obj, h->len};
    int r = fn(&c, user_data);
    if (r) {
      return r;
    }
  }
  return 0;
}

int mcp_disp_agent_get_stats_versioned(const mcp_disp_agent *a, int version,
                                       mcp_disp_agent_stats *st) {
  if (!a || !st || version < 1) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  memcpy(st, &a->stats,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_disp_agent_stats),
                           MCP_VSTRUCT_N));
  return 0;
}
