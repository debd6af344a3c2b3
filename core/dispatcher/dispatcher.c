/*
 * swarmkit's Dispatcher, manager side (mcp/dispatcher.h, issue 16).
 *
 * The registry maps session ids and node ids to sessions; each call of
 * the five methods is one mcp_stream whose session object is a dcall.
 * Sessions are refcounted: the registry holds one reference while the
 * session is live, every call attached to it another, so that a call of a
 * replaced or expired session can still say how it ends (its end()) after
 * the registry forgot the session.
 *
 * Assignments messages are written by hand with mcp_msg_builder so that
 * the objects' stored bodies are shared, never decoded nor re-encoded.
 * Protobuf fields may come in any order, so each message's changes are
 * written first and its type/applies_to/results_in last, once known.
 */
#include <assert.h>
#include <stddef.h>
#include <stdlib.h>

#include "mcp/pballoc.h" /* the engine's public API only */
#include "mcp/dispatcher.h"

#include "github.com/docker/swarmkit/api/dispatcher.pb-c.h"

#define DISP_DEFAULT_PERIOD (5 * MCP_SECONDS)
#define DISP_DEFAULT_EPSILON (500 * MCP_MILLISECONDS) /* swarmkit's */
#define DISP_PEER_WEIGHT 10 /* remotes.DefaultObservationWeight */
#define DISP_MAX_ADDR_LEN 128
#define DISP_GRACE_MULTIPLIER 3 /* swarmkit's defaultGracePeriodMultiplier */
#define DISP_DEFAULT_DEBOUNCE (100 * MCP_MILLISECONDS)
#define DISP_DEFAULT_MAX_DELAY (10 * MCP_SECONDS)
#define DISP_DEFAULT_MAX_CHANGES 100
#define DISP_DEFAULT_MAX_STATUSES 65536
#define DISP_MAX_NODE_LEN 1024

enum { M_SESSION, M_HEARTBEAT, M_UTS, M_TASKS, M_ASSIGN, M_N };
enum { S_LIVE, S_REPLACED, S_EXPIRED };

typedef struct dcall dcall;

typedef struct dsess {
  char *id;
  char *node;
  uint8_t *desc;   /* SessionRequest.description as sent (NULL: none) */
  size_t desc_len;
  char *addr;      /* the agent's IP ("" unknown) */
  mcp_tstamp deadline;
  int state;
  size_t refs;
  dcall *calls;
} dsess;

/* What an Assignments call has sent: name -> version, so that a full take
 * (the change log no longer reaches, or the collection went) is turned
 * into the differences the agent needs, as swarmkit keeps its tasksMap. */
typedef struct sent_entry {
  char *name;
  char *version;
  uint64_t mark;
} sent_entry;

typedef struct tstat {
  char *task_id;
  char *node;
  char *message;
  char *err;
  uint8_t *status;
  size_t status_len;
  int state;
  mcp_tstamp updated;
} tstat;

struct dcall {
  mcp_disp *d;
  int method;
  mcp_stream *st;
  dcall *prev, *next; /* in sess->calls */
  dsess *sess;
  char *peer_node; /* verified CN under TLS, else NULL */
  char peer_addr[DISP_MAX_ADDR_LEN]; /* the peer's IP, "" unknown */
  int got_request;
  /* After the session ended: Session sent its last SessionMessage;
   * Assignments sent its next message; Tasks saw its next change (then the
   * call ends, as swarmkit's loops notice at their next turn). */
  int tail_done;
  int fail;
  int status;
  const char *details;
  mcp_msg *reply; /* the next message (unary reply, SessionMessage) */
  mcp_watch *w;   /* Session: "nodes"; Tasks, Assignments: node/<id> */
  int first_sent;
  /* Assignments. */
  mcp_map sent;
  uint64_t mark;
  uint64_t seq;
  char applies_to[24];
  mcp_msg **q;
  size_t qhead, qn, qcap;
  size_t nchg; /* changes in the message being built */
  int cur_type;
  int err; /* first error inside a take callback */
  int hit; /* a take callback saw what the call looks for */
  char detail_buf[128]; /* |details| when formatted */
};

typedef struct disp_ctx {
  mcp_disp *d;
  int method;
} disp_ctx;

struct mcp_disp {
  mcp_mem mem;
  mcp_disp_options o;
  char **managers;
  char **manager_ids;
  mcp_map by_id;
  mcp_map by_node;
  mcp_map tasks;
  mcp_msg_builder *b;
  mcp_service_def defs[M_N];
  disp_ctx ctx[M_N];
  mcp_disp_stats stats;
};

static const char *const method_paths[M_N] = {
    MCP_DISP_METHOD_SESSION, MCP_DISP_METHOD_HEARTBEAT,
    MCP_DISP_METHOD_UPDATE_TASK_STATUS, MCP_DISP_METHOD_TASKS,
    MCP_DISP_METHOD_ASSIGNMENTS};

const char *mcp_disp_kind_name(int kind) {
  switch (kind) {
  case MCP_DISP_TASK:
    return "task";
  case MCP_DISP_SECRET:
    return "secret";
  case MCP_DISP_CONFIG:
    return "config";
  default:
    return NULL;
  }
}

static size_t join(char *buf, size_t len, const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b), n = na + nb;
  if (len) {
    size_t ca = na < len - 1 ? na : len - 1;
    size_t cb = nb < len - 1 - ca ? nb : len - 1 - ca;
    memcpy(buf, a, ca);
    memcpy(buf + ca, b, cb);
    buf[ca + cb] = 0;
  }
  return n;
}

size_t mcp_disp_node_collection(char *buf, size_t len, const char *node) {
  return join(buf, len, MCP_DISP_NODE_PREFIX, node);
}

size_t mcp_disp_item_name(char *buf, size_t len, int kind, const char *id) {
  static const char *const prefix[] = {NULL, "task/", "secret/", "config/"};
  if (!mcp_disp_kind_name(kind)) {
    if (len) {
      buf[0] = 0;
    }
    return 0;
  }
  return join(buf, len, prefix[kind], id);
}

/* The kind of a view resource from its name, and where its id starts;
 * 0 for a name this protocol does not carry (invisible to the node). */
static int kind_of_name(const char *name, const char **id) {
  static const struct {
    const char *p;
    size_t n;
    int kind;
  } k[] = {{"task/", 5, MCP_DISP_TASK},
           {"secret/", 7, MCP_DISP_SECRET},
           {"config/", 7, MCP_DISP_CONFIG}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; ++i) {
    if (strncmp(name, k[i].p, k[i].n) == 0 && name[k[i].n]) {
      *id = name + k[i].n;
      return k[i].kind;
    }
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* Options                                                             */
/* ------------------------------------------------------------------ */

static const size_t disp_opt_sizes[] = {
    0, offsetof(mcp_disp_options, manager_ids), sizeof(mcp_disp_options)};
#define DISP_OPT_VN (sizeof disp_opt_sizes / sizeof disp_opt_sizes[0])

static void disp_options_default(mcp_disp_options *o) {
  memset(o, 0, sizeof *o);
  o->heartbeat_period = DISP_DEFAULT_PERIOD;
  o->heartbeat_epsilon = DISP_DEFAULT_EPSILON;
  o->debounce = DISP_DEFAULT_DEBOUNCE;
  o->max_delay = DISP_DEFAULT_MAX_DELAY;
  o->max_changes = DISP_DEFAULT_MAX_CHANGES;
  o->max_task_statuses = DISP_DEFAULT_MAX_STATUSES;
}

void mcp_disp_options_default_versioned(int version, mcp_disp_options *opts) {
  mcp_disp_options o;
  disp_options_default(&o);
  memcpy(opts, &o, mcp_vstruct_size(version, disp_opt_sizes, DISP_OPT_VN));
}

/* ------------------------------------------------------------------ */
/* Registry                                                            */
/* ------------------------------------------------------------------ */

static void sess_unref(mcp_disp *d, dsess *s) {
  assert(s->refs > 0);
  if (--s->refs == 0) {
    assert(!s->calls);
    mcp_mem_free(&d->mem, s->id);
    mcp_mem_free(&d->mem, s->node);
    mcp_mem_free(&d->mem, s->desc);
    mcp_mem_free(&d->mem, s->addr);
    mcp_mem_free(&d->mem, s);
  }
}

/* Takes |s| out of the registry (replaced or expired) and wakes its
 * calls: their transport pumps them, and their end() reports how. */
static void sess_end(mcp_disp *d, dsess *s, int state) {
  assert(s->state == S_LIVE);
  s->state = state;
  mcp_map_del(&d->by_id, s->id);
  if (mcp_map_get(&d->by_node, s->node) == s) {
    mcp_map_del(&d->by_node, s->node);
  }
  if (state == S_EXPIRED) {
    d->stats.sessions_expired++;
  } else {
    d->stats.sessions_replaced++;
  }
  d->stats.sessions--;
  for (dcall *c = s->calls; c; c = c->next) {
    if (c->st) {
      mcp_stream_wake(c->st);
    }
  }
  sess_unref(d, s);
}

static int sess_due(const dsess *s, mcp_tstamp ts) {
  return s->state == S_LIVE && ts >= s->deadline;
}

/* The live session |id| at |ts| (expiring it when its time has come). */
static dsess *sess_lookup(mcp_disp *d, const char *id, mcp_tstamp ts) {
  dsess *s;
  if (!id || !*id) {
    return NULL;
  }
  s = mcp_map_get(&d->by_id, id);
  if (s && sess_due(s, ts)) {
    sess_end(d, s, S_EXPIRED);
    return NULL;
  }
  return s;
}

/* A heartbeat period, jittered as swarmkit's periodChooser (period.go):
 * uniform in [period - epsilon, period + epsilon), so that the agents of
 * a restarted manager do not beat in step. */
static mcp_tstamp choose_period(mcp_disp *d) {
  mcp_tstamp eps = d->o.heartbeat_epsilon;
  uint8_t r[8];
  uint64_t u = 0;
  if (!eps) {
    return d->o.heartbeat_period;
  }
  d->o.rand(r, sizeof r, d->o.rand_user_data);
  for (size_t i = 0; i < sizeof r; ++i) {
    u = u << 8 | r[i];
  }
  return d->o.heartbeat_period - eps + u % (2 * eps);
}

/* The deadline a period gives: swarmkit expires a node after 3 of them. */
static mcp_tstamp grace(mcp_tstamp period) {
  return period * DISP_GRACE_MULTIPLIER;
}

static mcp_tstamp add_ts(mcp_tstamp a, mcp_tstamp b) {
  return a > MCP_TSTAMP_MAX - b ? MCP_TSTAMP_MAX : a + b;
}

/* A new live session for |node|, replacing the node's previous one. */
static int sess_create(mcp_disp *d, const char *node, mcp_tstamp ts,
                       dsess **ps) {
  uint8_t r[16];
  char hex[33];
  static const char digits[] = "0123456789abcdef";
  dsess *s = mcp_mem_calloc(&d->mem, 1, sizeof *s);
  if (!s) {
    return MCP_ERR_NOMEM;
  }
  /* A collision with a live id is astronomically unlikely, but a weak
   * test generator may repeat: draw again. */
  for (int tries = 0;; ++tries) {
    d->o.rand(r, sizeof r, d->o.rand_user_data);
    for (size_t i = 0; i < sizeof r; ++i) {
      hex[2 * i] = digits[r[i] >> 4];
      hex[2 * i + 1] = digits[r[i] & 15];
    }
    hex[32] = 0;
    if (!mcp_map_get(&d->by_id, hex) || tries > 8) {
      break;
    }
  }
  s->id = mcp_mem_strdup(&d->mem, hex);
  s->node = mcp_mem_strdup(&d->mem, node);
  s->addr = mcp_mem_strdup(&d->mem, "");
  if (!s->id || !s->node || !s->addr ||
      mcp_map_reserve(&d->by_id, &d->mem, 1) ||
      mcp_map_reserve(&d->by_node, &d->mem, 1) ||
      mcp_map_get(&d->by_id, hex)) {
    mcp_mem_free(&d->mem, s->id);
    mcp_mem_free(&d->mem, s->node);
    mcp_mem_free(&d->mem, s->addr);
    mcp_mem_free(&d->mem, s);
    return MCP_ERR_NOMEM;
  }
  dsess *old = mcp_map_get(&d->by_node, node);
  if (old) {
    /* swarmkit: a node registering again ends its older session. */
    sess_end(d, old, S_REPLACED);
  }
  s->deadline = add_ts(ts, grace(choose_period(d)));
  s->refs = 1;
  s->state = S_LIVE;
  mcp_map_put(&d->by_id, &d->mem, s->id, s, NULL);
  mcp_map_put(&d->by_node, &d->mem, s->node, s, NULL);
  d->stats.sessions++;
  d->stats.sessions_created++;
  *ps = s;
  return 0;
}

static void call_attach(dcall *c, dsess *s) {
  assert(!c->sess);
  c->sess = s;
  s->refs++;
  c->prev = NULL;
  c->next = s->calls;
  if (s->calls) {
    s->calls->prev = c;
  }
  s->calls = c;
}

static void call_detach(dcall *c) {
  dsess *s = c->sess;
  if (!s) {
    return;
  }
  if (c->prev) {
    c->prev->next = c->next;
  } else {
    s->calls = c->next;
  }
  if (c->next) {
    c->next->prev = c->prev;
  }
  c->sess = NULL;
  sess_unref(c->d, s);
}

mcp_tstamp mcp_disp_get_expiry(const mcp_disp *d) {
  mcp_tstamp t = MCP_TSTAMP_MAX;
  void *v;
  for (size_t i = 0; mcp_map_iter(&d->by_id, &i, &v);) {
    const dsess *s = v;
    if (s->deadline < t) {
      t = s->deadline;
    }
  }
  return t;
}

void mcp_disp_handle_expiry(mcp_disp *d, mcp_tstamp ts) {
  dsess **due;
  size_t n = 0;
  void *v;
  for (size_t i = 0; mcp_map_iter(&d->by_id, &i, &v);) {
    n += sess_due(v, ts);
  }
  if (!n) {
    return;
  }
  /* Ending a session deletes it from the map being walked: collect
   * first. Without memory for the list, walk again after each one. */
  due = mcp_mem_malloc(&d->mem, n * sizeof *due);
  if (due) {
    n = 0;
    for (size_t i = 0; mcp_map_iter(&d->by_id, &i, &v);) {
      if (sess_due(v, ts)) {
        due[n++] = v;
      }
    }
    for (size_t k = 0; k < n; ++k) {
      sess_end(d, due[k], S_EXPIRED);
    }
    mcp_mem_free(&d->mem, due);
    return;
  }
  for (int again = 1; again;) {
    again = 0;
    for (size_t i = 0; mcp_map_iter(&d->by_id, &i, &v);) {
      if (sess_due(v, ts)) {
        sess_end(d, v, S_EXPIRED);
        again = 1;
        break;
      }
    }
  }
}

int mcp_disp_sessions(const mcp_disp *d, mcp_disp_session_fn fn,
                      void *user_data) {
  void *v;
  for (size_t i = 0; mcp_map_iter(&d->by_id, &i, &v);) {
    const dsess *s = v;
    mcp_disp_session_info info = {s->node, s->id, s->deadline, 0, "", 0};
    int seen = 0;
    /* Calls are attached newest first: the first Assignments call met is
     * the newest. */
    for (const dcall *c = s->calls; c; c = c->next) {
      info.streams++;
      if (c->method == M_ASSIGN && !seen) {
        seen = 1;
        info.results_in = c->applies_to; /* the last results_in framed */
        info.assignments_messages = c->seq;
      }
    }
    int r = fn(&info, user_data);
    if (r) {
      return r;
    }
  }
  return 0;
}

const char *mcp_disp_node_session(const mcp_disp *d, const char *node,
                                  mcp_tstamp ts) {
  const dsess *s = mcp_map_get(&d->by_node, node);
  return s && !sess_due(s, ts) ? s->id : NULL;
}

/* ------------------------------------------------------------------ */
/* Calls: common                                                       */
/* ------------------------------------------------------------------ */

static void call_fail(dcall *c, int status, const char *details) {
  if (!c->fail) {
    c->fail = 1;
    c->status = status;
    c->details = details;
  }
}

static void call_invalid(dcall *c) {
  c->d->stats.invalid_session_calls++;
  call_fail(c, MCP_CODE_INVALID_ARGUMENT, MCP_DISP_ERR_SESSION_INVALID);
}

/* The live session a call names, checked against the TLS identity; NULL
 * ends the call "session invalid". */
static dsess *call_session(dcall *c, const char *id, mcp_tstamp ts) {
  dsess *s = sess_lookup(c->d, id, ts);
  if (s && c->peer_node && strcmp(s->node, c->peer_node) != 0) {
    s = NULL;
  }
  if (!s && c->peer_node &&
      !mcp_disp_node_session(c->d, c->peer_node, ts)) {
    /* swarmkit's GetWithSession: a node without a session at all is
     * NotFound; one whose session differs, InvalidArgument. Without TLS
     * the node of an unknown id is unknown: InvalidArgument. */
    c->d->stats.invalid_session_calls++;
    call_fail(c, MCP_CODE_NOT_FOUND, MCP_DISP_ERR_NOT_REGISTERED);
    return NULL;
  }
  if (!s) {
    call_invalid(c);
  }
  return s;
}

/* The call watches the node: it has not failed and, if its session
 * ended, has not yet reached the turn at which it ends. */
static int call_watching(const dcall *c) {
  return !c->fail && c->sess && c->w && !c->tail_done;
}

/* How a call of a session that ended ends: swarmkit's GetWithSession at
 * the call's next turn. An expired node is deregistered (NotFound) unless
 * it registered again meanwhile (its session differs: InvalidArgument). */
static void ended_status(const dcall *c, int *status, const char **details) {
  const dsess *live = mcp_map_get(&c->d->by_node, c->sess->node);
  if (c->sess->state == S_EXPIRED && !live) {
    *status = MCP_CODE_NOT_FOUND;
    *details = MCP_DISP_ERR_NOT_REGISTERED;
  } else {
    *status = MCP_CODE_INVALID_ARGUMENT;
    *details = MCP_DISP_ERR_SESSION_INVALID;
  }
}

static int end_fn(const void *sess, int *status, const char **details) {
  const dcall *c = sess;
  if (c->fail) {
    *status = c->status;
    *details = c->details;
    return 1;
  }
  if (c->sess && c->sess->state != S_LIVE && c->tail_done) {
    ended_status(c, status, details);
    return 1;
  }
  return 0;
}

/* Every method takes exactly one request: a peer that half-closes without
 * sending it gets an answer rather than a call that never ends. */
static void half_close_fn(void *sess, mcp_tstamp ts) {
  dcall *c = sess;
  MCP_UNUSED(ts);
  if (!c->got_request) {
    call_fail(c, MCP_CODE_INVALID_ARGUMENT, "no request message");
  }
}

static mcp_tstamp get_expiry_fn(const void *sess) {
  const dcall *c = sess;
  mcp_tstamp t = MCP_TSTAMP_MAX;
  if (c->sess && c->sess->state == S_LIVE) {
    t = c->sess->deadline;
  }
  if (c->w && c->method != M_SESSION && !c->fail && !c->tail_done) {
    mcp_tstamp w = mcp_watch_get_expiry(c->w);
    if (w < t) {
      t = w;
    }
  }
  return t;
}

static int handle_expiry_fn(void *sess, mcp_tstamp ts) {
  dcall *c = sess;
  if (c->sess && sess_due(c->sess, ts)) {
    sess_end(c->d, c->sess, S_EXPIRED);
  }
  return 0;
}

static void queue_clear(dcall *c) {
  for (size_t i = 0; i < c->qn; ++i) {
    mcp_msg_free(c->q[(c->qhead + i) % c->qcap]);
  }
  c->qhead = c->qn = 0;
}

static void sent_free(mcp_disp *d, sent_entry *e) {
  mcp_mem_free(&d->mem, e->name);
  mcp_mem_free(&d->mem, e->version);
  mcp_mem_free(&d->mem, e);
}

static void del_fn(void *sess) {
  dcall *c = sess;
  mcp_disp *d = c->d;
  void *v;
  call_detach(c);
  mcp_watch_del(c->w);
  mcp_msg_free(c->reply);
  queue_clear(c);
  mcp_mem_free(&d->mem, c->q);
  for (size_t i = 0; mcp_map_iter(&c->sent, &i, &v);) {
    sent_free(d, v);
  }
  mcp_map_free(&c->sent, &d->mem);
  mcp_mem_free(&d->mem, c->peer_node);
  d->stats.streams--;
  mcp_mem_free(&d->mem, c);
}

/* Each method accepts one request message (unary and server streaming). */
static int second_request(dcall *c) {
  if (c->got_request) {
    return MCP_ERR_PROTOCOL;
  }
  c->got_request = 1;
  return 0;
}

/* Decodes the call's one request. NULL: *err = PROTOCOL (a second
 * request), NOMEM, or 0 when the bytes are no such message (the call then
 * ends INVALID_ARGUMENT "malformed <type>"). */
static void *unpack(dcall *c, const ProtobufCMessageDescriptor *desc,
                    const uint8_t *in, size_t len, int *err) {
  mcp_pballoc pa;
  *err = second_request(c);
  if (*err) {
    return NULL;
  }
  mcp_pballoc_init(&pa, &c->d->mem);
  void *m = protobuf_c_message_unpack(desc, &pa.a, len, in);
  if (!m) {
    *err = pa.failed ? MCP_ERR_NOMEM : 0;
    if (!pa.failed) {
      mcp_fmt(c->detail_buf, sizeof c->detail_buf, "malformed %s",
               desc->name);
      call_fail(c, MCP_CODE_INVALID_ARGUMENT, c->detail_buf);
    }
  }
  return m;
}

static void unpack_free(mcp_disp *d, void *m) {
  mcp_pballoc pa;
  mcp_pballoc_init(&pa, &d->mem);
  protobuf_c_message_free_unpacked(m, &pa.a);
}

static int pop_reply(dcall *c, mcp_msg **pmsg) {
  if (c->reply) {
    *pmsg = c->reply;
    c->reply = NULL;
    return 1;
  }
  return 0;
}

static void put_str_field(mcp_msg_builder *b, uint32_t f, const char *s) {
  size_t n = strlen(s);
  if (n) {
    mcp_msg_builder_len_field(b, f, s, n);
  }
}

/* ------------------------------------------------------------------ */
/* Session                                                             */
/* ------------------------------------------------------------------ */

static int take_node(const mcp_item *item, void *user_data) {
  dcall *c = user_data;
  if (c->sess && strcmp(item->name, c->sess->node) == 0) {
    c->hit = 1;
  }
  return 0;
}

enum { NODE_DESCRIPTION = 4, NODE_STATUS = 5 }; /* Node (objects.proto) */
enum { NS_DOWN = 1, NS_READY = 2 };              /* NodeStatus.State */

/* The view's Node without its description and status (the session says
 * those): calls |put| for each field kept, returns the bytes kept. A
 * body that does not parse is dropped from where it stops. */
static size_t node_kept(const mcp_item *it, mcp_msg_builder *b) {
  mcp_wire w = {it->body, it->body + it->body_len};
  size_t n = 0;
  for (;;) {
    const uint8_t *st = w.p;
    mcp_wire_field fd;
    if (mcp_wire_field_next(&w, &fd) != 1) {
      return n;
    }
    if (fd.num != NODE_DESCRIPTION && fd.num != NODE_STATUS) {
      n += (size_t)(w.p - st);
      if (b) {
        mcp_msg_builder_bytes(b, st, (size_t)(w.p - st));
      }
    }
  }
}

/* SessionMessage{session_id, node, managers}. node: the view's Node (or
 * one with only its id) with the description the agent sent and the
 * status swarmkit's markNodeReady/markNodeNotReady write: READY and the
 * agent's address while live, DOWN "heartbeat failure" once expired; a
 * replaced session's last message shows the node as its newer session
 * left it (dispatcher.go:500-510, 1256-1300). */
static int session_message(dcall *c, mcp_msg **pmsg) {
  mcp_disp *d = c->d;
  mcp_msg_builder *b = d->b;
  const dsess *s = c->sess, *who = s;
  mcp_item it;
  int have = c->w && mcp_watch_get(c->w, s->node, &it) && it.body;
  int state = NS_READY;
  const char *msg = "", *addr;
  size_t idl = strlen(s->node), kept, stl, nl;
  if (s->state == S_EXPIRED) {
    state = NS_DOWN;
    msg = MCP_DISP_ERR_HEARTBEAT;
  } else if (s->state == S_REPLACED) {
    const dsess *now = mcp_map_get(&d->by_node, s->node);
    who = now ? now : s;
  }
  addr = state == NS_DOWN ? "" : who->addr;
  kept = have ? node_kept(&it, NULL) : mcp_wire_len_field_size(idl);
  stl = 2 + (*msg ? mcp_wire_len_field_size(strlen(msg)) : 0) +
        (*addr ? mcp_wire_len_field_size(strlen(addr)) : 0);
  nl = kept + mcp_wire_len_field_size(stl) +
       (who->desc ? mcp_wire_len_field_size(who->desc_len) : 0);
  put_str_field(b, 1, s->id);
  mcp_msg_builder_key(b, 2, MCP_WT_LEN);
  mcp_msg_builder_varint(b, nl);
  if (have) {
    node_kept(&it, b);
  } else {
    mcp_msg_builder_len_field(b, 1, s->node, idl);
  }
  if (who->desc) {
    mcp_msg_builder_len_field(b, NODE_DESCRIPTION, who->desc, who->desc_len);
  }
  mcp_msg_builder_key(b, NODE_STATUS, MCP_WT_LEN);
  mcp_msg_builder_varint(b, stl);
  mcp_msg_builder_key(b, 1, MCP_WT_VARINT);
  mcp_msg_builder_varint(b, (uint64_t)state);
  put_str_field(b, 2, msg);
  put_str_field(b, 3, addr);
  for (size_t i = 0; i < d->o.nmanagers; ++i) {
    /* WeightedPeer{peer = 1 Peer{node_id = 1, addr = 2}, weight = 2} */
    const char *mid = d->manager_ids[i];
    size_t al = strlen(d->managers[i]), il = strlen(mid);
    size_t peer = mcp_wire_len_field_size(al) + (il ? mcp_wire_len_field_size(il) : 0);
    size_t wp = mcp_wire_len_field_size(peer) + 2;
    mcp_msg_builder_key(b, 3, MCP_WT_LEN);
    mcp_msg_builder_varint(b, wp);
    mcp_msg_builder_key(b, 1, MCP_WT_LEN);
    mcp_msg_builder_varint(b, peer);
    put_str_field(b, 1, mid);
    mcp_msg_builder_len_field(b, 2, d->managers[i], al);
    mcp_msg_builder_key(b, 2, MCP_WT_VARINT);
    mcp_msg_builder_varint(b, DISP_PEER_WEIGHT);
  }
  return mcp_msg_builder_finish(b, "session", pmsg);
}

/* SessionRequest.description (field 1) as the agent encoded it: 1 and its
 * bytes, 0 when absent. The request decoded already: no error here. */
static int request_description(const uint8_t *in, size_t len,
                               const uint8_t **d, size_t *n) {
  mcp_wire w = {in, in + len};
  mcp_wire_field fd;
  int found = 0;
  while (mcp_wire_field_next(&w, &fd) == 1) {
    if (fd.num == 1 && fd.wt == MCP_WT_LEN) {
      *d = fd.data;
      *n = fd.len;
      found = 1;
    }
  }
  return found;
}

/* The session now describes the node as this request did (swarmkit's
 * markNodeReady on every Session call). All or nothing. */
static int sess_describe(mcp_disp *d, dsess *s, const uint8_t *in,
                         size_t len, const char *addr) {
  const uint8_t *dp = NULL;
  size_t dl = 0;
  uint8_t *desc = NULL;
  char *a;
  if (request_description(in, len, &dp, &dl)) {
    desc = mcp_mem_malloc(&d->mem, dl ? dl : 1);
    if (!desc) {
      return MCP_ERR_NOMEM;
    }
    if (dl) {
      memcpy(desc, dp, dl);
    }
  }
  a = mcp_mem_strdup(&d->mem, addr);
  if (!a) {
    mcp_mem_free(&d->mem, desc);
    return MCP_ERR_NOMEM;
  }
  mcp_mem_free(&d->mem, s->desc);
  mcp_mem_free(&d->mem, s->addr);
  s->desc = desc;
  s->desc_len = dl;
  s->addr = a;
  return 0;
}

static int node_ok(const char *s) {
  size_t n = strlen(s);
  return n > 0 && n <= DISP_MAX_NODE_LEN &&
         mcp_utf8_valid((const uint8_t *)s, n, 0);
}

static int session_recv(void *sess, const uint8_t *in, size_t len,
                        mcp_tstamp ts) {
  dcall *c = sess;
  mcp_disp *d = c->d;
  int err;
  Docker__Swarmkit__V1__SessionRequest *req;
  const char *node;
  dsess *s;
  req = unpack(c, &docker__swarmkit__v1__session_request__descriptor, in, len,
               &err);
  if (!req) {
    return err;
  }
  node = c->peer_node;
  if (!node) {
    node = req->description && req->description->hostname
               ? req->description->hostname
               : "";
  }
  if (!node_ok(node)) {
    unpack_free(d, req);
    call_fail(c, MCP_CODE_INVALID_ARGUMENT,
              "no node id: a TLS client certificate or "
              "description.hostname (1 to 1024 bytes of UTF-8) is required");
    return 0;
  }
  if (!mcp_str_valid(req->session_id)) {
    unpack_free(d, req);
    call_fail(c, MCP_CODE_INVALID_ARGUMENT, "session_id is not UTF-8");
    return 0;
  }
  s = sess_lookup(d, req->session_id, ts);
  if (s && strcmp(s->node, node) == 0) {
    /* A live session id is kept (swarmkit resumes it). */
    s->deadline = add_ts(ts, grace(choose_period(d)));
  } else {
    err = sess_create(d, node, ts, &s);
  }
  unpack_free(d, req);
  if (!err) {
    err = sess_describe(d, s, in, len, c->peer_addr);
  }
  if (err) {
    return err;
  }
  call_attach(c, s);
  err = mcp_watch_new(&c->w, d->o.view, MCP_DISP_NODES_COLLECTION, NULL,
                      &d->mem);
  if (!err) {
    /* session_message() looks the node up; only its changes matter now
     * (a take would visit every node: O(nodes) per Session call). */
    mcp_watch_skip(c->w, ts);
  }
  if (!err) {
    err = session_message(c, &c->reply);
  }
  return err;
}

static int session_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  dcall *c = sess;
  if (c->fail || !c->sess) {
    return 0;
  }
  if (pop_reply(c, pmsg)) {
    return 1;
  }
  if (c->sess->state != S_LIVE) {
    /* swarmkit's Session loop sends the node update that ended the
     * session (the newer registration, or DOWN) before it notices. */
    int r;
    if (c->tail_done) {
      return 0;
    }
    c->tail_done = 1;
    r = session_message(c, pmsg);
    return r < 0 ? r : 1;
  }
  /* swarmkit sends a SessionMessage again when the node object changes. */
  if (c->w && mcp_watch_changed(c->w)) {
    int full, r;
    c->hit = 0;
    r = mcp_watch_take(c->w, ts, take_node, c, &full);
    if (r < 0) {
      return r;
    }
    if (c->hit || (full && r == 0)) {
      r = session_message(c, pmsg);
      return r < 0 ? r : 1;
    }
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* Heartbeat                                                           */
/* ------------------------------------------------------------------ */

static int heartbeat_recv(void *sess, const uint8_t *in, size_t len,
                          mcp_tstamp ts) {
  dcall *c = sess;
  mcp_disp *d = c->d;
  int err;
  Docker__Swarmkit__V1__HeartbeatRequest *req;
  dsess *s;
  req = unpack(c, &docker__swarmkit__v1__heartbeat_request__descriptor, in,
               len, &err);
  if (!req) {
    return err;
  }
  s = call_session(c, req->session_id, ts);
  unpack_free(d, req);
  if (!s) {
    return 0;
  }
  mcp_tstamp period = choose_period(d);
  s->deadline = add_ts(ts, grace(period));
  d->stats.heartbeats++;
  {
    /* HeartbeatResponse{period: Duration{seconds = 1, nanos = 2}} */
    mcp_msg_builder *b = d->b;
    uint64_t sec = period / MCP_SECONDS;
    uint64_t ns = period % MCP_SECONDS;
    size_t dl = (sec ? 1 + mcp_wire_varint_len(sec) : 0) +
                (ns ? 1 + mcp_wire_varint_len(ns) : 0);
    mcp_msg_builder_key(b, 1, MCP_WT_LEN);
    mcp_msg_builder_varint(b, dl);
    if (sec) {
      mcp_msg_builder_key(b, 1, MCP_WT_VARINT);
      mcp_msg_builder_varint(b, sec);
    }
    if (ns) {
      mcp_msg_builder_key(b, 2, MCP_WT_VARINT);
      mcp_msg_builder_varint(b, ns);
    }
    return mcp_msg_builder_finish(b, "heartbeat", &c->reply);
  }
}

static int unary_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  MCP_UNUSED(ts);
  return pop_reply(sess, pmsg);
}

/* ------------------------------------------------------------------ */
/* UpdateTaskStatus                                                    */
/* ------------------------------------------------------------------ */

static void tstat_free(mcp_disp *d, tstat *t) {
  if (t) {
    mcp_mem_free(&d->mem, t->task_id);
    mcp_mem_free(&d->mem, t->node);
    mcp_mem_free(&d->mem, t->message);
    mcp_mem_free(&d->mem, t->err);
    mcp_mem_free(&d->mem, t->status);
    mcp_mem_free(&d->mem, t);
  }
}

static tstat *tstat_new(mcp_disp *d, const char *task_id, const char *node,
                        const Docker__Swarmkit__V1__TaskStatus *st,
                        mcp_tstamp ts) {
  tstat *t = mcp_mem_calloc(&d->mem, 1, sizeof *t);
  size_t n;
  if (!t) {
    return NULL;
  }
  n = protobuf_c_message_get_packed_size(&st->base);
  t->task_id = mcp_mem_strdup(&d->mem, task_id);
  t->node = mcp_mem_strdup(&d->mem, node);
  t->message = mcp_mem_strdup(&d->mem, st->message ? st->message : "");
  t->err = mcp_mem_strdup(&d->mem, st->err ? st->err : "");
  t->status = mcp_mem_malloc(&d->mem, n ? n : 1);
  if (!t->task_id || !t->node || !t->message || !t->err || !t->status) {
    tstat_free(d, t);
    return NULL;
  }
  /* Packed again from the decoded form: the request's bytes of it are
   * not at hand through protobuf-c, and this is the debug view only. */
  t->status_len = protobuf_c_message_pack(&st->base, t->status);
  t->state = (int)st->state;
  t->updated = ts;
  return t;
}

enum { TASK_UNKNOWN, TASK_MINE, TASK_OTHERS };

/* Whose task |id| is, by the view: in "node/<node>" it is the caller's; in
 * another node's collection, another node's; else unknown. Only a task not
 * on the caller's node costs a look at every node collection. */
static int task_owner(const mcp_disp *d, const char *node, const char *id) {
  char coll[DISP_MAX_NODE_LEN + 8], name[DISP_MAX_NODE_LEN + 8];
  size_t n = mcp_disp_item_name(name, sizeof name, MCP_DISP_TASK, id);
  if (n >= sizeof name) {
    return TASK_UNKNOWN; /* longer than any name the view can hold */
  }
  mcp_fmt(coll, sizeof coll, "%s%s", MCP_DISP_NODE_PREFIX, node);
  if (mcp_store_version(d->o.view, coll, name)) {
    return TASK_MINE;
  }
  for (size_t i = 0, k = mcp_store_collection_count(d->o.view); i < k; ++i) {
    const char *cn = mcp_store_collection_name(d->o.view, i);
    if (cn && strncmp(cn, MCP_DISP_NODE_PREFIX,
                      sizeof MCP_DISP_NODE_PREFIX - 1) == 0 &&
        mcp_store_version(d->o.view, cn, name)) {
      return TASK_OTHERS;
    }
  }
  return TASK_UNKNOWN;
}

static int uts_recv(void *sess, const uint8_t *in, size_t len, mcp_tstamp ts) {
  dcall *c = sess;
  mcp_disp *d = c->d;
  int err;
  Docker__Swarmkit__V1__UpdateTaskStatusRequest *req;
  dsess *s;
  tstat **fresh = NULL;
  size_t nnew = 0;
  int denied = 0;
  req = unpack(c, &docker__swarmkit__v1__update_task_status_request__descriptor,
               in, len, &err);
  if (!req) {
    return err;
  }
  s = call_session(c, req->session_id, ts);
  if (!s) {
    unpack_free(d, req);
    return 0;
  }
  for (size_t i = 0; i < req->n_updates; ++i) {
    const char *id = req->updates[i]->task_id;
    if (!mcp_str_valid(id) || !*id) {
      unpack_free(d, req);
      call_fail(c, MCP_CODE_INVALID_ARGUMENT, "task id missing or not UTF-8");
      return 0;
    }
  }
  /* All or nothing: build every entry first, then swap them in. */
  if (req->n_updates) {
    fresh = mcp_mem_calloc(&d->mem, req->n_updates, sizeof *fresh);
    if (!fresh) {
      err = MCP_ERR_NOMEM;
    }
  }
  for (size_t i = 0; !err && !denied && i < req->n_updates; ++i) {
    const Docker__Swarmkit__V1__UpdateTaskStatusRequest__TaskStatusUpdate *u =
        req->updates[i];
    int owner;
    /* swarmkit (dispatcher.go:640-657): an update without status or for a
     * task it does not know is skipped; one for another node's task
     * refuses the whole call. */
    if (!u->status) {
      continue;
    }
    owner = task_owner(d, s->node, u->task_id);
    denied = owner == TASK_OTHERS;
    if (owner != TASK_MINE) {
      continue;
    }
    fresh[i] = tstat_new(d, u->task_id, s->node, u->status, ts);
    if (!fresh[i]) {
      err = MCP_ERR_NOMEM;
    } else if (!mcp_map_get(&d->tasks, u->task_id)) {
      ++nnew;
    }
  }
  if (!err && !denied && d->tasks.n + nnew > d->o.max_task_statuses) {
    err = MCP_ERR_LIMIT;
  }
  if (!err && !denied && mcp_map_reserve(&d->tasks, &d->mem, nnew)) {
    err = MCP_ERR_NOMEM;
  }
  for (size_t i = 0; i < req->n_updates; ++i) {
    if (!fresh || !fresh[i]) {
      continue;
    }
    if (err || denied) {
      tstat_free(d, fresh[i]);
      continue;
    }
    tstat_free(d, mcp_map_put(&d->tasks, &d->mem, fresh[i]->task_id,
                               fresh[i], NULL));
    d->stats.status_updates++;
  }
  mcp_mem_free(&d->mem, fresh);
  unpack_free(d, req);
  if (err == MCP_ERR_LIMIT) {
    call_fail(c, MCP_CODE_RESOURCE_EXHAUSTED, "too many task statuses kept");
    return 0;
  }
  if (denied) {
    call_fail(c, MCP_CODE_PERMISSION_DENIED, MCP_DISP_ERR_NOT_ASSIGNED);
    return 0;
  }
  if (err) {
    return err;
  }
  d->stats.task_statuses = d->tasks.n;
  /* UpdateTaskStatusResponse{}: no bytes. */
  return mcp_msg_builder_finish(d->b, "update_task_status", &c->reply);
}

int mcp_disp_task_statuses(const mcp_disp *d, mcp_disp_task_fn fn,
                           void *user_data) {
  void *v;
  for (size_t i = 0; mcp_map_iter(&d->tasks, &i, &v);) {
    const tstat *t = v;
    mcp_disp_task_status st = {t->task_id, t->node,   t->state,
                               t->message, t->err,    t->status,
                               t->status_len, t->updated};
    int r = fn(&st, user_data);
    if (r) {
      return r;
    }
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* Tasks and Assignments: the request                                  */
/* ------------------------------------------------------------------ */

static int watch_recv(void *sess, const uint8_t *in, size_t len,
                      mcp_tstamp ts) {
  dcall *c = sess;
  mcp_disp *d = c->d;
  int err;
  const ProtobufCMessageDescriptor *desc =
      c->method == M_TASKS ? &docker__swarmkit__v1__tasks_request__descriptor
                           : &docker__swarmkit__v1__assignments_request__descriptor;
  ProtobufCMessage *req;
  const char *id;
  dsess *s;
  char coll[DISP_MAX_NODE_LEN + 8];
  mcp_watch_options wo;
  req = unpack(c, desc, in, len, &err);
  if (!req) {
    return err;
  }
  /* TasksRequest and AssignmentsRequest: session_id = 1, alone. */
  id = c->method == M_TASKS
           ? ((Docker__Swarmkit__V1__TasksRequest *)req)->session_id
           : ((Docker__Swarmkit__V1__AssignmentsRequest *)req)->session_id;
  s = call_session(c, id, ts);
  unpack_free(d, req);
  if (!s) {
    return 0;
  }
  call_attach(c, s);
  mcp_fmt(coll, sizeof coll, "%s%s", MCP_DISP_NODE_PREFIX, s->node);
  wo.debounce = d->o.debounce;
  wo.max_delay = d->o.max_delay;
  return mcp_watch_new(&c->w, d->o.view, coll, &wo, &d->mem);
}

/* ------------------------------------------------------------------ */
/* Tasks (deprecated): the full task list on every change              */
/* ------------------------------------------------------------------ */

static int tasks_changed_fn(const mcp_item *item, void *user_data) {
  dcall *c = user_data;
  const char *id;
  if (kind_of_name(item->name, &id) == MCP_DISP_TASK) {
    c->hit = 1;
  }
  return 0;
}

static int tasks_add_fn(const mcp_item *item, void *user_data) {
  dcall *c = user_data;
  mcp_msg_builder *b = c->d->b;
  const char *id;
  if (kind_of_name(item->name, &id) != MCP_DISP_TASK) {
    return 0;
  }
  mcp_msg_builder_key(b, 1, MCP_WT_LEN);
  mcp_msg_builder_varint(b, item->body_len);
  if (item->body_len) {
    mcp_msg_builder_body(b, item);
  }
  return 0;
}

static int tasks_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  dcall *c = sess;
  int full, r;
  if (!call_watching(c)) {
    return 0;
  }
  mcp_watch_note(c->w, ts);
  if (c->first_sent && !mcp_watch_ready(c->w, ts)) {
    return 0;
  }
  c->hit = 0;
  r = mcp_watch_take(c->w, ts, tasks_changed_fn, c, &full);
  if (r < 0) {
    return r;
  }
  if (c->first_sent && !c->hit && !(full && r == 0)) {
    return 0;
  }
  if (c->sess->state != S_LIVE) {
    /* swarmkit's Tasks loop checks the session before it sends. */
    c->tail_done = 1;
    return 0;
  }
  c->first_sent = 1;
  r = mcp_watch_foreach(c->w, tasks_add_fn, c);
  if (r) {
    return r;
  }
  r = mcp_msg_builder_finish(c->d->b, "tasks", pmsg);
  if (r) {
    return r;
  }
  c->d->stats.tasks_messages++;
  return 1;
}

/* ------------------------------------------------------------------ */
/* Assignments                                                         */
/* ------------------------------------------------------------------ */

static int queue_push(dcall *c, mcp_msg *m) {
  if (c->qn == c->qcap) {
    size_t ncap = c->qcap ? 2 * c->qcap : 4;
    mcp_msg **nq = mcp_mem_malloc(&c->d->mem, ncap * sizeof *nq);
    if (!nq) {
      mcp_msg_free(m);
      return MCP_ERR_NOMEM;
    }
    for (size_t i = 0; i < c->qn; ++i) {
      nq[i] = c->q[(c->qhead + i) % c->qcap];
    }
    mcp_mem_free(&c->d->mem, c->q);
    c->q = nq;
    c->qcap = ncap;
    c->qhead = 0;
  }
  c->q[(c->qhead + c->qn) % c->qcap] = m;
  c->qn++;
  return 0;
}

/* Ends the message being built: type, applies_to, results_in (fields 1-3,
 * after the changes), chained to the previous one. */
static int assign_finish(dcall *c) {
  mcp_disp *d = c->d;
  mcp_msg_builder *b = d->b;
  char res[24];
  mcp_msg *m;
  int r;
  c->seq++;
  mcp_fmt(res, sizeof res, "%zu", (size_t)c->seq);
  if (c->cur_type != MCP_DISP_COMPLETE) {
    mcp_msg_builder_key(b, 1, MCP_WT_VARINT);
    mcp_msg_builder_varint(b, (uint64_t)c->cur_type);
  }
  put_str_field(b, 2, c->applies_to);
  put_str_field(b, 3, res);
  r = mcp_msg_builder_finish(b, "assignments", &m);
  if (r) {
    return r;
  }
  memcpy(c->applies_to, res, sizeof res);
  d->stats.assignments_messages++;
  d->stats.assignments_changes += c->nchg;
  c->nchg = 0;
  /* A message split off continues as INCREMENTAL. */
  c->cur_type = MCP_DISP_INCREMENTAL;
  return queue_push(c, m);
}

/* One change: AssignmentsMessage.changes (4) = AssignmentChange{
 * assignment (1) = Assignment{<kind> = object}, action (2)}. */
static int assign_change(dcall *c, int kind, const char *id,
                         const mcp_item *item) {
  mcp_msg_builder *b = c->d->b;
  size_t olen, alen, clen, idlen = strlen(id);
  if (item) {
    olen = item->body_len;
  } else {
    olen = mcp_wire_len_field_size(idlen); /* {id = 1} */
  }
  alen = mcp_wire_len_field_size(olen);
  clen = mcp_wire_len_field_size(alen) + (item ? 0 : 2);
  mcp_msg_builder_key(b, 4, MCP_WT_LEN);
  mcp_msg_builder_varint(b, clen);
  mcp_msg_builder_key(b, 1, MCP_WT_LEN);
  mcp_msg_builder_varint(b, alen);
  mcp_msg_builder_key(b, (uint32_t)kind, MCP_WT_LEN);
  mcp_msg_builder_varint(b, olen);
  if (item) {
    if (item->body_len) {
      mcp_msg_builder_body(b, item);
    }
  } else {
    mcp_msg_builder_len_field(b, 1, id, idlen);
    mcp_msg_builder_key(b, 2, MCP_WT_VARINT);
    mcp_msg_builder_varint(b, MCP_DISP_REMOVE);
  }
  if (++c->nchg >= c->d->o.max_changes) {
    return assign_finish(c);
  }
  return 0;
}

static int assign_item_fn(const mcp_item *item, void *user_data) {
  dcall *c = user_data;
  mcp_disp *d = c->d;
  const char *id;
  int kind = kind_of_name(item->name, &id);
  sent_entry *e;
  if (!kind) {
    return 0; /* invisible to the node */
  }
  e = mcp_map_get(&c->sent, item->name);
  if (item->removed) {
    if (!e) {
      return 0; /* never sent: nothing to remove */
    }
    mcp_map_del(&c->sent, item->name);
    sent_free(d, e);
    return assign_change(c, kind, id, NULL);
  }
  if (e) {
    e->mark = c->mark;
    if (item->version && strcmp(e->version, item->version) == 0) {
      return 0; /* a full take re-reporting what the node has */
    }
    char *v = mcp_mem_strdup(&d->mem, item->version ? item->version : "");
    if (!v) {
      return MCP_ERR_NOMEM;
    }
    mcp_mem_free(&d->mem, e->version);
    e->version = v;
  } else {
    e = mcp_mem_calloc(&d->mem, 1, sizeof *e);
    if (!e || mcp_map_reserve(&c->sent, &d->mem, 1)) {
      mcp_mem_free(&d->mem, e);
      return MCP_ERR_NOMEM;
    }
    e->name = mcp_mem_strdup(&d->mem, item->name);
    e->version = mcp_mem_strdup(&d->mem, item->version ? item->version : "");
    if (!e->name || !e->version) {
      sent_free(d, e);
      return MCP_ERR_NOMEM;
    }
    e->mark = c->mark;
    mcp_map_put(&c->sent, &d->mem, e->name, e, NULL);
  }
  return assign_change(c, kind, id, item);
}

/* After a full take: what was sent and is no longer there goes. The
 * stale entries are collected first (deleting from the map while walking
 * it would restart the walk: O(n^2)). */
static int assign_sweep(dcall *c) {
  mcp_disp *d = c->d;
  sent_entry **stale;
  size_t n = 0;
  void *v;
  int r = 0;
  for (size_t i = 0; mcp_map_iter(&c->sent, &i, &v);) {
    n += ((sent_entry *)v)->mark != c->mark;
  }
  if (!n) {
    return 0;
  }
  stale = mcp_mem_malloc(&d->mem, n * sizeof *stale);
  if (!stale) {
    return MCP_ERR_NOMEM;
  }
  n = 0;
  for (size_t i = 0; mcp_map_iter(&c->sent, &i, &v);) {
    if (((sent_entry *)v)->mark != c->mark) {
      stale[n++] = v;
    }
  }
  for (size_t k = 0; k < n; ++k) {
    sent_entry *e = stale[k];
    const char *id = "";
    int kind = kind_of_name(e->name, &id);
    if (!r) {
      r = assign_change(c, kind, id, NULL); /* copies the id */
    }
    mcp_map_del(&c->sent, e->name);
    sent_free(d, e);
  }
  mcp_mem_free(&d->mem, stale);
  return r;
}

static int assign_take(dcall *c, mcp_tstamp ts) {
  int full, r;
  c->mark++;
  c->nchg = 0;
  c->cur_type = c->first_sent ? MCP_DISP_INCREMENTAL : MCP_DISP_COMPLETE;
  r = mcp_watch_take(c->w, ts, assign_item_fn, c, &full);
  if (r >= 0 && full) {
    r = assign_sweep(c);
  }
  if (r < 0) {
    /* Whatever was half built goes; the stream ends with the error. */
    mcp_msg *m = NULL;
    if (mcp_msg_builder_finish(c->d->b, NULL, &m) == 0) {
      mcp_msg_free(m);
    }
    return r;
  }
  /* The first message goes out even when empty; later, a message only
   * when something visible changed. */
  if (c->nchg || !c->first_sent) {
    r = assign_finish(c);
    if (r) {
      return r;
    }
  }
  c->first_sent = 1;
  return 0;
}

static int assign_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  dcall *c = sess;
  if (!call_watching(c)) {
    return 0;
  }
  if (!c->qn) {
    mcp_watch_note(c->w, ts); /* the max_delay clock: while nothing queues */
  }
  if (!c->qn && (!c->first_sent || mcp_watch_ready(c->w, ts))) {
    int r = assign_take(c, ts);
    if (r) {
      return r;
    }
  }
  if (c->qn) {
    *pmsg = c->q[c->qhead];
    c->qhead = (c->qhead + 1) % c->qcap;
    c->qn--;
    /* swarmkit's Assignments loop sends its next message, then checks
     * the session (the changes it split off go with it). */
    c->tail_done = c->sess->state != S_LIVE && !c->qn;
    return 1;
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* Ops and open                                                        */
/* ------------------------------------------------------------------ */

static const mcp_stream_ops disp_ops[M_N] = {
    {"session", MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE, session_recv,
     session_next, get_expiry_fn, handle_expiry_fn, end_fn, half_close_fn, del_fn, NULL, NULL},
    {"heartbeat", 0, heartbeat_recv, unary_next, get_expiry_fn,
     handle_expiry_fn, end_fn, half_close_fn, del_fn, NULL, NULL},
    {"update_task_status", 0, uts_recv, unary_next, get_expiry_fn,
     handle_expiry_fn, end_fn, half_close_fn, del_fn, NULL, NULL},
    {"tasks", MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE, watch_recv, tasks_next,
     get_expiry_fn, handle_expiry_fn, end_fn, half_close_fn, del_fn, NULL, NULL},
    {"assignments", MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE, watch_recv,
     assign_next, get_expiry_fn, handle_expiry_fn, end_fn, half_close_fn, del_fn, NULL, NULL},
};

static int disp_open(void *user_data, const mcp_peer_info *peer,
                     mcp_tstamp ts, mcp_stream **pst) {
  disp_ctx *x = user_data;
  mcp_disp *d = x->d;
  dcall *c = mcp_mem_calloc(&d->mem, 1, sizeof *c);
  mcp_stream *st;
  int r;
  if (!c) {
    return MCP_ERR_NOMEM;
  }
  c->d = d;
  c->method = x->method;
  if (peer && peer->address) {
    /* swarmkit's nodeIPFromContext: the host part of the peer address. */
    char key[DISP_MAX_ADDR_LEN];
    const char *h = key;
    size_t n;
    mcp_admit_peer_key(peer->address, key, sizeof key);
    if (strncmp(h, "ipv4:", 5) == 0 || strncmp(h, "ipv6:", 5) == 0) {
      h += 5;
      n = strlen(h);
      if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        ++h;
        n -= 2;
      } else if (n >= 6 && strncmp(h, "%5B", 3) == 0 &&
                 strcmp(h + n - 3, "%5D") == 0) {
        h += 3;
        n -= 6;
      }
      memcpy(c->peer_addr, h, n);
      c->peer_addr[n] = 0;
    } else if (strchr(h, ':') && strchr(h, ':') == strrchr(h, ':') &&
               strncmp(h, "unix:", 5) != 0) {
      /* "host:port" (mcp_admit_peer_key kept it whole). */
      n = (size_t)(strchr(h, ':') - h);
      memcpy(c->peer_addr, h, n);
      c->peer_addr[n] = 0;
    }
  }
  if (peer && peer->tls && peer->common_name) {
    /* swarmkit: the node is who the certificate says. */
    c->peer_node = mcp_mem_strdup(&d->mem, peer->common_name);
    if (!c->peer_node) {
      mcp_mem_free(&d->mem, c);
      return MCP_ERR_NOMEM;
    }
  }
  d->stats.streams++;
  r = mcp_stream_new(&st, &disp_ops[x->method], c, &d->mem, ts);
  if (r) {
    return r; /* del_fn freed |c| */
  }
  c->st = st;
  *pst = st;
  return 0;
}

size_t mcp_disp_services(mcp_disp *d, const mcp_service_def **defs) {
  *defs = d->defs;
  return M_N;
}

/* ------------------------------------------------------------------ */
/* Manager object                                                      */
/* ------------------------------------------------------------------ */

int mcp_disp_new_versioned(mcp_disp **pd, int version,
                           const mcp_disp_options *opts, mcp_tstamp ts) {
  mcp_disp_options o;
  mcp_mem mem;
  mcp_disp *d;
  MCP_UNUSED(ts);
  if (!pd || !opts || !mcp_vstruct_known(version, DISP_OPT_VN)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  disp_options_default(&o);
  memcpy(&o, opts, mcp_vstruct_size(version, disp_opt_sizes, DISP_OPT_VN));
  if (!o.view || !o.rand || (o.nmanagers && !o.managers)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  for (size_t i = 0; i < o.nmanagers; ++i) {
    if (!mcp_str_valid(o.managers[i]) ||
        (o.manager_ids && o.manager_ids[i] &&
         !mcp_str_valid(o.manager_ids[i]))) {
      return MCP_ERR_INVALID_ARGUMENT;
    }
  }
  o.heartbeat_period = o.heartbeat_period ? o.heartbeat_period
                                          : DISP_DEFAULT_PERIOD;
  if (o.heartbeat_epsilon > o.heartbeat_period / 2) {
    o.heartbeat_epsilon = o.heartbeat_period / 2;
  }
  o.max_changes = mcp_limit_or(o.max_changes, DISP_DEFAULT_MAX_CHANGES);
  o.max_task_statuses =
      mcp_limit_or(o.max_task_statuses, DISP_DEFAULT_MAX_STATUSES);
  mcp_mem_init(&mem, o.mem);
  d = mcp_mem_calloc(&mem, 1, sizeof *d);
  if (!d) {
    return MCP_ERR_NOMEM;
  }
  d->mem = mem;
  d->o = o;
  d->o.mem = &d->mem;
  d->o.managers = NULL;
  d->o.manager_ids = NULL;
  if (o.nmanagers) {
    d->managers = mcp_mem_calloc(&mem, o.nmanagers, sizeof *d->managers);
    d->manager_ids = mcp_mem_calloc(&mem, o.nmanagers, sizeof *d->manager_ids);
    if (!d->managers || !d->manager_ids) {
      d->o.nmanagers = 0;
      mcp_disp_del(d);
      return MCP_ERR_NOMEM;
    }
  }
  for (size_t i = 0; i < o.nmanagers; ++i) {
    const char *id = o.manager_ids && o.manager_ids[i] ? o.manager_ids[i] : "";
    d->managers[i] = mcp_mem_strdup(&mem, o.managers[i]);
    d->manager_ids[i] = mcp_mem_strdup(&mem, id);
    if (!d->managers[i] || !d->manager_ids[i]) {
      d->o.nmanagers = i + 1; /* frees what was copied (NULL is fine) */
      mcp_disp_del(d);
      return MCP_ERR_NOMEM;
    }
  }
  if (mcp_msg_builder_new(&d->b, &d->mem)) {
    mcp_disp_del(d);
    return MCP_ERR_NOMEM;
  }
  for (int m = 0; m < M_N; ++m) {
    d->ctx[m].d = d;
    d->ctx[m].method = m;
    d->defs[m].method = method_paths[m];
    d->defs[m].open = disp_open;
    d->defs[m].user_data = &d->ctx[m];
  }
  *pd = d;
  return 0;
}

void mcp_disp_del(mcp_disp *d) {
  void *v;
  if (!d) {
    return;
  }
  assert(d->stats.streams == 0);
  for (size_t i = 0; mcp_map_iter(&d->by_id, &i, &v);) {
    dsess *s = v;
    s->state = S_REPLACED;
    sess_unref(d, s);
  }
  mcp_map_free(&d->by_id, &d->mem);
  mcp_map_free(&d->by_node, &d->mem);
  for (size_t i = 0; mcp_map_iter(&d->tasks, &i, &v);) {
    tstat_free(d, v);
  }
  mcp_map_free(&d->tasks, &d->mem);
  for (size_t i = 0; i < d->o.nmanagers; ++i) {
    mcp_mem_free(&d->mem, d->managers ? d->managers[i] : NULL);
    mcp_mem_free(&d->mem, d->manager_ids ? d->manager_ids[i] : NULL);
  }
  mcp_mem_free(&d->mem, d->managers);
  mcp_mem_free(&d->mem, d->manager_ids);
  mcp_msg_builder_del(d->b);
  mcp_mem_free(&d->mem, d);
}

int mcp_disp_get_stats_versioned(const mcp_disp *d, int version,
                                 mcp_disp_stats *st) {
  if (!d || !st || version < 1) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  memcpy(st, &d->stats,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_disp_stats), MCP_VSTRUCT_N));
  return 0;
}
