/*
 * swarmkit's Dispatcher on the engine (mcp/dispatcher.h, issue 16): the
 * manager's rules (sessions, replacement, heartbeat expiry, unknown
 * sessions, task statuses, COMPLETE then INCREMENTAL chains, the
 * 100-change split, batching, what a view change means to a node) and the
 * agent's (applying, the chain check, malformed input, new sessions),
 * driving the streams through mcp_stream_* directly and decoding what they
 * send with protobuf-c. A small in-memory "transport" pairs an agent's
 * client def with the manager's service defs for the whole loop.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"
#include "mcp/dispatcher.h"

#include "github.com/docker/swarmkit/api/dispatcher.pb-c.h"

#define MS MCP_MILLISECONDS
#define SEC MCP_SECONDS

enum { SESSION, HEARTBEAT, UTS, TASKS, ASSIGN };

/* ---- view content ---- */

static uint8_t *task_bytes(const char *id, const char *node, int state,
                           const char *image, size_t *len) {
  Docker__Swarmkit__V1__Task t = DOCKER__SWARMKIT__V1__TASK__INIT;
  Docker__Swarmkit__V1__TaskStatus st = DOCKER__SWARMKIT__V1__TASK_STATUS__INIT;
  Docker__Swarmkit__V1__TaskSpec spec = DOCKER__SWARMKIT__V1__TASK_SPEC__INIT;
  Docker__Swarmkit__V1__ContainerSpec c =
      DOCKER__SWARMKIT__V1__CONTAINER_SPEC__INIT;
  t.id = (char *)id;
  t.node_id = (char *)node;
  t.desired_state = (Docker__Swarmkit__V1__TaskState)512; /* RUNNING */
  st.state = (Docker__Swarmkit__V1__TaskState)state;
  t.status = &st;
  c.image = (char *)(image ? image : "nginx");
  spec.runtime_case = DOCKER__SWARMKIT__V1__TASK_SPEC__RUNTIME_CONTAINER;
  spec.container = &c;
  t.spec = &spec;
  *len = docker__swarmkit__v1__task__get_packed_size(&t);
  uint8_t *p = malloc(*len ? *len : 1);
  docker__swarmkit__v1__task__pack(&t, p);
  return p;
}

static uint8_t *id_bytes(int kind, const char *id, size_t *len) {
  ProtobufCMessage *m;
  Docker__Swarmkit__V1__Secret s = DOCKER__SWARMKIT__V1__SECRET__INIT;
  Docker__Swarmkit__V1__Config c = DOCKER__SWARMKIT__V1__CONFIG__INIT;
  Docker__Swarmkit__V1__Node n;
  /* The function, not the INIT macro: the macro names a deprecated field
   * (Node.attachment), which clang warns about. */
  docker__swarmkit__v1__node__init(&n);
  if (kind == MCP_DISP_SECRET) {
    s.id = (char *)id;
    m = &s.base;
  } else if (kind == MCP_DISP_CONFIG) {
    c.id = (char *)id;
    m = &c.base;
  } else {
    n.id = (char *)id;
    m = &n.base;
  }
  *len = protobuf_c_message_get_packed_size(m);
  uint8_t *p = malloc(*len ? *len : 1);
  protobuf_c_message_pack(m, p);
  return p;
}

static void put(mcp_store *st, const char *coll, const char *name,
                const char *version, const char *type, const uint8_t *b,
                size_t n, mcp_tstamp ts) {
  mcp_resource r = {0};
  r.name = name;
  r.version = version;
  r.type_url = type;
  r.body = b;
  r.body_len = n;
  ck_assert_int_ge(mcp_store_upsert(st, coll, &r, ts), 0);
}

static void put_task(mcp_store *st, const char *node, const char *id,
                     const char *version, mcp_tstamp ts) {
  char coll[64], name[64];
  size_t n;
  uint8_t *b = task_bytes(id, node, 192, version, &n);
  snprintf(coll, sizeof coll, "node/%s", node);
  snprintf(name, sizeof name, "task/%s", id);
  put(st, coll, name, version, MCP_DISP_TYPE_TASK, b, n, ts);
  free(b);
}

static void put_secret(mcp_store *st, const char *node, const char *id,
                       mcp_tstamp ts) {
  char coll[64], name[64];
  size_t n;
  uint8_t *b = id_bytes(MCP_DISP_SECRET, id, &n);
  snprintf(coll, sizeof coll, "node/%s", node);
  snprintf(name, sizeof name, "secret/%s", id);
  put(st, coll, name, "v1", MCP_DISP_TYPE_SECRET, b, n, ts);
  free(b);
}

static void del(mcp_store *st, const char *node, const char *name,
                mcp_tstamp ts) {
  char coll[64];
  snprintf(coll, sizeof coll, "node/%s", node);
  ck_assert_int_ge(mcp_store_delete(st, coll, name, ts), 0);
}

/* ---- the manager and its calls ---- */

static uint64_t seed = 42;

static mcp_disp *disp_new(mcp_store *view, mcp_tstamp period,
                          mcp_tstamp debounce) {
  static const char *const mgrs[] = {"10.0.0.1:4242", "10.0.0.2:4242"};
  static const char *const ids[] = {"manager-1", NULL};
  mcp_disp_options o;
  mcp_disp *d = NULL;
  mcp_disp_options_default(&o);
  o.view = view;
  o.rand = mcp_rand_splitmix64;
  o.rand_user_data = &seed;
  o.managers = mgrs;
  o.manager_ids = ids;
  o.nmanagers = 2;
  o.heartbeat_period = period;
  o.heartbeat_epsilon = 0; /* exact periods; jitter has its own test */
  o.debounce = debounce;
  o.max_delay = debounce ? 10 * debounce : 0;
  ck_assert_int_eq(mcp_disp_new(&d, &o, 0), 0);
  return d;
}

typedef struct call {
  mcp_stream *st;
  int wakes;
} call;

static void waker(mcp_stream *st, void *ud) {
  (void)st;
  ((call *)ud)->wakes++;
}

/* Opens |method| from the transport peer |addr| (|cn|: its certificate's
 * CN under TLS, NULL without). */
static call *call_open_from(mcp_disp *d, int method, const char *cn,
                            const char *addr, mcp_tstamp ts) {
  const mcp_service_def *defs;
  mcp_peer_info peer = {addr, cn != NULL, cn, NULL, 0};
  call *c = calloc(1, sizeof *c);
  ck_assert_uint_eq(mcp_disp_services(d, &defs), 5);
  ck_assert_int_eq(defs[method].open(defs[method].user_data, &peer, ts, &c->st),
                   0);
  mcp_stream_set_waker(c->st, waker, c);
  return c;
}

static call *call_open(mcp_disp *d, int method, const char *cn,
                       mcp_tstamp ts) {
  return call_open_from(d, method, cn, "ipv4:127.0.0.1:5555", ts);
}

static void call_close(call *c) {
  if (c) {
    mcp_stream_del(c->st);
    free(c);
  }
}

static void call_send(call *c, const ProtobufCMessage *m, mcp_tstamp ts) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *b = malloc(n ? n : 1);
  protobuf_c_message_pack(m, b);
  mcp_stream_recv(c->st, b, n, ts);
  free(b);
}

/* One pump: the action; a message goes to *out (malloc'd). */
static int pump(call *c, mcp_tstamp ts, uint8_t **out, size_t *len,
                int *status, const char **details) {
  mcp_msg *m = NULL;
  int st = -1;
  const char *dt = NULL;
  int a = mcp_stream_pump(c->st, ts, 1, &m, &st, &dt);
  if (a == MCP_STREAM_SEND) {
    *len = mcp_msg_len(m);
    *out = malloc(*len ? *len : 1);
    mcp_msg_flatten(m, *out);
    mcp_msg_free(m);
  }
  if (status) {
    *status = st;
  }
  if (details) {
    *details = dt;
  }
  return a;
}

static void *expect_msg(call *c, mcp_tstamp ts,
                        const ProtobufCMessageDescriptor *desc) {
  uint8_t *b = NULL;
  size_t n = 0;
  int a = pump(c, ts, &b, &n, NULL, NULL);
  ck_assert_int_eq(a, MCP_STREAM_SEND);
  void *m = protobuf_c_message_unpack(desc, NULL, n, b);
  ck_assert_ptr_nonnull(m);
  free(b);
  return m;
}

static void expect_idle(call *c, mcp_tstamp ts) {
  uint8_t *b = NULL;
  size_t n;
  int a = pump(c, ts, &b, &n, NULL, NULL);
  free(b);
  ck_assert_int_eq(a, MCP_STREAM_IDLE);
}

static void expect_end(call *c, mcp_tstamp ts, int status,
                       const char *details) {
  uint8_t *b = NULL;
  size_t n;
  int st;
  const char *dt;
  int a = pump(c, ts, &b, &n, &st, &dt);
  free(b);
  ck_assert_int_eq(a, MCP_STREAM_END);
  ck_assert_int_eq(st, status);
  if (details) {
    ck_assert_str_eq(dt, details);
  }
}

typedef Docker__Swarmkit__V1__SessionMessage smsg;

static smsg *expect_smsg(call *c, mcp_tstamp ts) {
  return expect_msg(c, ts, &docker__swarmkit__v1__session_message__descriptor);
}

static void smsg_free(smsg *m) {
  docker__swarmkit__v1__session_message__free_unpacked(m, NULL);
}

/* Sends SessionRequest{description.hostname = |node|, session_id =
 * |resume| (NULL: none)} on |c|. */
static void session_send(call *c, const char *node, const char *resume,
                         mcp_tstamp ts) {
  Docker__Swarmkit__V1__SessionRequest r =
      DOCKER__SWARMKIT__V1__SESSION_REQUEST__INIT;
  Docker__Swarmkit__V1__NodeDescription desc =
      DOCKER__SWARMKIT__V1__NODE_DESCRIPTION__INIT;
  desc.hostname = (char *)node;
  r.description = &desc;
  if (resume) {
    r.session_id = (char *)resume;
  }
  call_send(c, &r.base, ts);
}

/* Opens Session for |node| (hostname) and returns the call; *sid gets the
 * session id of the first SessionMessage. */
static call *session(mcp_disp *d, const char *node, const char *resume,
                     mcp_tstamp ts, char *sid) {
  call *c = call_open(d, SESSION, NULL, ts);
  session_send(c, node, resume, ts);
  mcp_stream_half_close(c->st, ts);
  Docker__Swarmkit__V1__SessionMessage *m =
      expect_msg(c, ts, &docker__swarmkit__v1__session_message__descriptor);
  ck_assert_uint_gt(strlen(m->session_id), 0);
  snprintf(sid, 64, "%s", m->session_id);
  docker__swarmkit__v1__session_message__free_unpacked(m, NULL);
  return c;
}

static call *by_session(mcp_disp *d, int method, const char *sid,
                        mcp_tstamp ts) {
  call *c = call_open(d, method, NULL, ts);
  Docker__Swarmkit__V1__AssignmentsRequest r =
      DOCKER__SWARMKIT__V1__ASSIGNMENTS_REQUEST__INIT;
  /* HeartbeatRequest, TasksRequest and AssignmentsRequest are the same
   * bytes: session_id = 1. */
  r.session_id = (char *)sid;
  call_send(c, &r.base, ts);
  mcp_stream_half_close(c->st, ts);
  return c;
}

static mcp_tstamp heartbeat(mcp_disp *d, const char *sid, mcp_tstamp ts) {
  call *c = by_session(d, HEARTBEAT, sid, ts);
  Docker__Swarmkit__V1__HeartbeatResponse *m =
      expect_msg(c, ts, &docker__swarmkit__v1__heartbeat_response__descriptor);
  ck_assert_ptr_nonnull(m->period);
  mcp_tstamp p = (mcp_tstamp)m->period->seconds * SEC +
                 (mcp_tstamp)m->period->nanos;
  docker__swarmkit__v1__heartbeat_response__free_unpacked(m, NULL);
  expect_end(c, ts, 0, NULL);
  call_close(c);
  return p;
}

static void expect_invalid(mcp_disp *d, int method, const char *sid,
                           mcp_tstamp ts) {
  call *c = by_session(d, method, sid, ts);
  expect_end(c, ts, MCP_CODE_INVALID_ARGUMENT, MCP_DISP_ERR_SESSION_INVALID);
  call_close(c);
}

typedef Docker__Swarmkit__V1__AssignmentsMessage amsg;

static amsg *expect_assign(call *c, mcp_tstamp ts) {
  return expect_msg(c, ts, &docker__swarmkit__v1__assignments_message__descriptor);
}

static void amsg_free(amsg *m) {
  docker__swarmkit__v1__assignments_message__free_unpacked(m, NULL);
}

/* "U task/t1" or "R secret/s1" for change |i|. */
static const char *change_str(const amsg *m, size_t i) {
  static char buf[128];
  const Docker__Swarmkit__V1__AssignmentChange *c = m->changes[i];
  const Docker__Swarmkit__V1__Assignment *a = c->assignment;
  const char *kind = "?", *id = "?";
  ck_assert_ptr_nonnull(a);
  switch (a->item_case) {
  case DOCKER__SWARMKIT__V1__ASSIGNMENT__ITEM_TASK:
    kind = "task";
    id = a->task->id;
    break;
  case DOCKER__SWARMKIT__V1__ASSIGNMENT__ITEM_SECRET:
    kind = "secret";
    id = a->secret->id;
    break;
  case DOCKER__SWARMKIT__V1__ASSIGNMENT__ITEM_CONFIG:
    kind = "config";
    id = a->config->id;
    break;
  default:
    break;
  }
  snprintf(buf, sizeof buf, "%c %s/%s", c->action ? 'R' : 'U', kind, id);
  return buf;
}

static int has_change(const amsg *m, const char *s) {
  for (size_t i = 0; i < m->n_changes; ++i) {
    if (strcmp(change_str(m, i), s) == 0) {
      return 1;
    }
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* Session                                                             */
/* ------------------------------------------------------------------ */

START_TEST(test_session_first_message_and_stays_open) {
  mcp_store *view = th_store(NULL);
  size_t n;
  uint8_t *nb = id_bytes(0, "node-a", &n);
  put(view, MCP_DISP_NODES_COLLECTION, "node-a", "v1", MCP_DISP_TYPE_NODE, nb,
      n, 0);
  free(nb);
  mcp_disp *d = disp_new(view, 0, 0);
  Docker__Swarmkit__V1__SessionRequest r =
      DOCKER__SWARMKIT__V1__SESSION_REQUEST__INIT;
  Docker__Swarmkit__V1__NodeDescription desc =
      DOCKER__SWARMKIT__V1__NODE_DESCRIPTION__INIT;
  desc.hostname = "node-a";
  r.description = &desc;
  call *c = call_open(d, SESSION, NULL, 0);
  expect_idle(c, 0); /* nothing before the request */
  call_send(c, &r.base, 0);
  mcp_stream_half_close(c->st, 0);
  Docker__Swarmkit__V1__SessionMessage *m =
      expect_msg(c, 0, &docker__swarmkit__v1__session_message__descriptor);
  ck_assert_uint_eq(strlen(m->session_id), 32);
  ck_assert_ptr_nonnull(m->node);
  ck_assert_str_eq(m->node->id, "node-a");
  ck_assert_uint_eq(m->n_managers, 2);
  /* Issue 24 item 9: the manager's node id and weight 10
   * (dispatcher.go:204,211, remotes.DefaultObservationWeight). */
  ck_assert_str_eq(m->managers[0]->peer->addr, "10.0.0.1:4242");
  ck_assert_str_eq(m->managers[0]->peer->node_id, "manager-1");
  ck_assert_int_eq(m->managers[0]->weight, 10);
  ck_assert_str_eq(m->managers[1]->peer->addr, "10.0.0.2:4242");
  ck_assert_str_eq(m->managers[1]->peer->node_id, "");
  ck_assert_int_eq(m->managers[1]->weight, 10);
  /* The node as markNodeReady leaves it (dispatcher.go:500-510): the
   * description the agent sent, READY, the agent's IP. */
  ck_assert_ptr_nonnull(m->node->description);
  ck_assert_str_eq(m->node->description->hostname, "node-a");
  ck_assert_ptr_nonnull(m->node->status);
  ck_assert_int_eq(m->node->status->state, 2);
  ck_assert_str_eq(m->node->status->addr, "127.0.0.1");
  ck_assert_str_eq(mcp_disp_node_session(d, "node-a", 0), m->session_id);
  docker__swarmkit__v1__session_message__free_unpacked(m, NULL);
  /* The stream stays open after the peer's half-close. */
  expect_idle(c, 1 * SEC);
  /* The node object changes: a new SessionMessage, as swarmkit. */
  nb = id_bytes(0, "node-a", &n);
  put(view, MCP_DISP_NODES_COLLECTION, "node-a", "v2", MCP_DISP_TYPE_NODE, nb,
      n, 2 * SEC);
  free(nb);
  m = expect_msg(c, 2 * SEC, &docker__swarmkit__v1__session_message__descriptor);
  ck_assert_str_eq(m->node->id, "node-a");
  docker__swarmkit__v1__session_message__free_unpacked(m, NULL);
  /* Another node's change is not this session's. */
  nb = id_bytes(0, "node-b", &n);
  put(view, MCP_DISP_NODES_COLLECTION, "node-b", "v1", MCP_DISP_TYPE_NODE, nb,
      n, 3 * SEC);
  free(nb);
  expect_idle(c, 3 * SEC);
  mcp_disp_stats st;
  ck_assert_int_eq(mcp_disp_get_stats(d, &st), 0);
  ck_assert_uint_eq(st.sessions, 1);
  ck_assert_uint_eq(st.streams, 1);
  call_close(c);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

/* Issue 24 item 9: the node's status addr is the host of the peer
 * address (swarmkit's nodeIPFromContext) in every form the transports
 * give; a peer without an IP host (a Unix socket, an unknown form) leaves
 * it empty. */
START_TEST(test_session_node_addr_is_the_peer_host) {
  static const char *const cases[][2] = {
      {"ipv4:10.1.2.3:40000", "10.1.2.3"},
      {"ipv6:[::1]:40000", "::1"},
      {"ipv6:%5B::1%5D:40000", "::1"},    /* gRPC core's URI form */
      {"10.1.2.4:40000", "10.1.2.4"},     /* host:port, no scheme */
      {"unix:/run/mcp.sock", ""},
      {"[::1]:40000", ""},                /* not a form a transport gives */
      {"", ""},
      {NULL, ""},
  };
  mcp_store *view = th_store(NULL);
  mcp_disp *d = disp_new(view, 0, 0);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    call *c = call_open_from(d, SESSION, NULL, cases[i][0], 0);
    session_send(c, "node-a", NULL, 0);
    smsg *m = expect_smsg(c, 0);
    ck_assert_ptr_nonnull(m->node->status);
    ck_assert_msg(strcmp(m->node->status->addr, cases[i][1]) == 0,
                  "peer %s: addr \"%s\", want \"%s\"",
                  cases[i][0] ? cases[i][0] : "(null)", m->node->status->addr,
                  cases[i][1]);
    smsg_free(m);
    call_close(c);
  }
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_session_node_is_the_certificate_cn_under_tls) {
  mcp_store *view = th_store(NULL);
  mcp_disp *d = disp_new(view, 0, 0);
  Docker__Swarmkit__V1__SessionRequest r =
      DOCKER__SWARMKIT__V1__SESSION_REQUEST__INIT;
  Docker__Swarmkit__V1__NodeDescription desc =
      DOCKER__SWARMKIT__V1__NODE_DESCRIPTION__INIT;
  desc.hostname = "liar";
  r.description = &desc;
  call *c = call_open(d, SESSION, "node-cn", 0);
  call_send(c, &r.base, 0);
  Docker__Swarmkit__V1__SessionMessage *m =
      expect_msg(c, 0, &docker__swarmkit__v1__session_message__descriptor);
  ck_assert_ptr_null(mcp_disp_node_session(d, "liar", 0));
  ck_assert_str_eq(mcp_disp_node_session(d, "node-cn", 0), m->session_id);
  /* Another certificate cannot use that session: that node has none
   * (swarmkit's GetWithSession: NotFound "node not registered")... */
  call *h = call_open(d, HEARTBEAT, "node-other", 0);
  Docker__Swarmkit__V1__HeartbeatRequest hr =
      DOCKER__SWARMKIT__V1__HEARTBEAT_REQUEST__INIT;
  hr.session_id = m->session_id;
  call_send(h, &hr.base, 0);
  expect_end(h, 0, MCP_CODE_NOT_FOUND, MCP_DISP_ERR_NOT_REGISTERED);
  call_close(h);
  /* ...while the registered node naming another id is InvalidArgument. */
  h = call_open(d, HEARTBEAT, "node-cn", 0);
  hr.session_id = "not-its-session";
  call_send(h, &hr.base, 0);
  expect_end(h, 0, MCP_CODE_INVALID_ARGUMENT, MCP_DISP_ERR_SESSION_INVALID);
  call_close(h);
  docker__swarmkit__v1__session_message__free_unpacked(m, NULL);
  call_close(c);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_session_without_node_id_is_refused) {
  mcp_store *view = th_store(NULL);
  mcp_disp *d = disp_new(view, 0, 0);
  Docker__Swarmkit__V1__SessionRequest r =
      DOCKER__SWARMKIT__V1__SESSION_REQUEST__INIT;
  call *c = call_open(d, SESSION, NULL, 0);
  call_send(c, &r.base, 0);
  expect_end(c, 0, MCP_CODE_INVALID_ARGUMENT, NULL);
  call_close(c);
  /* Bytes that are no SessionRequest end the call: MALFORMED. */
  c = call_open(d, SESSION, NULL, 0);
  static const uint8_t junk[] = {0x0a, 0x05, 0x61, 0x62};
  mcp_stream_recv(c->st, junk, sizeof junk, 0);
  expect_end(c, 0, MCP_CODE_INVALID_ARGUMENT,
             "malformed docker.swarmkit.v1.SessionRequest");
  call_close(c);
  /* A half-close without a request: INVALID_ARGUMENT, for every method
   * (the streaming ones would otherwise never end). */
  for (int k = SESSION; k <= ASSIGN; ++k) {
    c = call_open(d, k, NULL, 0);
    mcp_stream_half_close(c->st, 0);
    expect_end(c, 0, MCP_CODE_INVALID_ARGUMENT, "no request message");
    call_close(c);
  }
  /* A second request on a unary call is a protocol violation. */
  char sid[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  c = by_session(d, HEARTBEAT, sid, 0);
  Docker__Swarmkit__V1__HeartbeatRequest hr =
      DOCKER__SWARMKIT__V1__HEARTBEAT_REQUEST__INIT;
  hr.session_id = sid;
  call_send(c, &hr.base, 0);
  expect_end(c, 0, mcp_error_grpc_status(MCP_ERR_PROTOCOL), NULL);
  call_close(c);
  call_close(s);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_session_second_session_replaces_the_older) {
  mcp_store *view = th_store(NULL);
  mcp_disp *d = disp_new(view, 0, 0);
  char sid1[64], sid2[64];
  call *s1 = session(d, "node-a", NULL, 0, sid1);
  call *a1 = by_session(d, ASSIGN, sid1, 0);
  amsg *m = expect_assign(a1, 0);
  amsg_free(m);
  call *t1 = by_session(d, TASKS, sid1, 0);
  Docker__Swarmkit__V1__TasksMessage *tm =
      expect_msg(t1, 0, &docker__swarmkit__v1__tasks_message__descriptor);
  docker__swarmkit__v1__tasks_message__free_unpacked(tm, NULL);
  /* The node again (an agent restarted): a new session. */
  call *s2 = session(d, "node-a", NULL, 1 * SEC, sid2);
  ck_assert_str_ne(sid1, sid2);
  ck_assert_str_eq(mcp_disp_node_session(d, "node-a", 1 * SEC), sid2);
  /* Issue 24 item 8: every stream of the older one was woken. Its Session
   * stream gets one more SessionMessage (its id, the node as the newer
   * session described it), then InvalidArgument "session invalid", as
   * swarmkit's Session loop (dispatcher.go:1455). */
  ck_assert_int_ge(s1->wakes, 1);
  ck_assert_int_ge(a1->wakes, 1);
  ck_assert_int_ge(t1->wakes, 1);
  smsg *sm = expect_smsg(s1, 1 * SEC);
  ck_assert_str_eq(sm->session_id, sid1);
  ck_assert_int_eq(sm->node->status->state, 2);
  smsg_free(sm);
  expect_end(s1, 1 * SEC, MCP_CODE_INVALID_ARGUMENT,
             MCP_DISP_ERR_SESSION_INVALID);
  call_close(s1);
  /* Assignments and Tasks end at their next event, not at once
   * (dispatcher.go:1124): Assignments sends it first, Tasks does not. */
  expect_idle(a1, 1 * SEC);
  expect_idle(t1, 1 * SEC);
  put_task(view, "node-a", "t1", "v1", 1500 * MS);
  m = expect_assign(a1, 1500 * MS);
  ck_assert_int_eq(m->type, MCP_DISP_INCREMENTAL);
  ck_assert_uint_eq(m->n_changes, 1);
  amsg_free(m);
  expect_end(a1, 1500 * MS, MCP_CODE_INVALID_ARGUMENT,
             MCP_DISP_ERR_SESSION_INVALID);
  expect_end(t1, 1500 * MS, MCP_CODE_INVALID_ARGUMENT,
             MCP_DISP_ERR_SESSION_INVALID);
  call_close(a1);
  call_close(t1);
  /* The old id is refused; the new one works. */
  expect_invalid(d, HEARTBEAT, sid1, 1 * SEC);
  expect_invalid(d, ASSIGN, sid1, 1 * SEC);
  ck_assert_uint_eq(heartbeat(d, sid2, 1 * SEC), 5 * SEC);
  /* The new session's own stream heard the task too (node unchanged). */
  expect_idle(s2, 1500 * MS);
  /* A Session naming its live id keeps it. */
  char sid3[64];
  call *s3 = session(d, "node-a", sid2, 2 * SEC, sid3);
  ck_assert_str_eq(sid3, sid2);
  expect_idle(s2, 2 * SEC);
  mcp_disp_stats st;
  mcp_disp_get_stats(d, &st);
  ck_assert_uint_eq(st.sessions, 1);
  ck_assert_uint_eq(st.sessions_created, 2);
  ck_assert_uint_eq(st.sessions_replaced, 1);
  call_close(s2);
  call_close(s3);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Heartbeat and expiry                                                */
/* ------------------------------------------------------------------ */

START_TEST(test_heartbeat_answers_the_period) {
  mcp_store *view = th_store(NULL);
  mcp_disp *d = disp_new(view, 2500 * MS, 0);
  char sid[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  ck_assert_uint_eq(heartbeat(d, sid, 0), 2500 * MS);
  mcp_disp_stats st;
  mcp_disp_get_stats(d, &st);
  ck_assert_uint_eq(st.heartbeats, 1);
  call_close(s);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

/* Issue 24 item 9: swarmkit's periodChooser (period.go) answers period +
 * a uniform draw in [-epsilon, epsilon) (default 500 ms), from the
 * injected generator, and expires 3 of those periods later. */
/* A manager id that is not UTF-8 is refused at creation. */
START_TEST(test_manager_ids_are_checked) {
  mcp_store *view = th_store(NULL);
  static const char *const mgrs[] = {"10.0.0.1:4242"};
  static const char *const bad[] = {"\xff"};
  mcp_disp_options o;
  mcp_disp *d = NULL;
  mcp_disp_options_default(&o);
  o.view = view;
  o.rand = mcp_rand_splitmix64;
  o.rand_user_data = &seed;
  o.managers = mgrs;
  o.nmanagers = 1;
  o.manager_ids = bad;
  ck_assert_int_eq(mcp_disp_new(&d, &o, 0), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(d);
  /* A V1 caller (no manager_ids, no epsilon) still works. */
  mcp_disp_options_default_versioned(MCP_DISP_OPTIONS_V1, &o);
  o.view = view;
  o.rand = mcp_rand_splitmix64;
  o.rand_user_data = &seed;
  ck_assert_int_eq(mcp_disp_new_versioned(&d, MCP_DISP_OPTIONS_V1, &o, 0), 0);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_heartbeat_period_is_jittered) {
  mcp_store *view = th_store(NULL);
  mcp_disp_options o;
  mcp_disp *d = NULL;
  uint64_t s0 = 7;
  mcp_disp_options_default(&o);
  ck_assert_uint_eq(o.heartbeat_epsilon, 500 * MS);
  o.view = view;
  o.rand = mcp_rand_splitmix64;
  o.rand_user_data = &s0;
  o.heartbeat_period = 5 * SEC;
  ck_assert_int_eq(mcp_disp_new(&d, &o, 0), 0);
  char sid[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  mcp_tstamp lo = MCP_TSTAMP_MAX, hi = 0;
  for (int i = 0; i < 200; ++i) {
    mcp_tstamp p = heartbeat(d, sid, (mcp_tstamp)i * MS);
    ck_assert_uint_ge(p, 4500 * MS);
    ck_assert_uint_lt(p, 5500 * MS);
    /* The session lives exactly 3 of the periods just answered. */
    ck_assert_uint_eq(mcp_disp_get_expiry(d), (mcp_tstamp)i * MS + 3 * p);
    lo = p < lo ? p : lo;
    hi = p > hi ? p : hi;
  }
  /* Spread over the window, not one value. */
  ck_assert_uint_lt(lo, 4700 * MS);
  ck_assert_uint_gt(hi, 5300 * MS);
  call_close(s);
  mcp_disp_del(d);
  /* An epsilon above half the period is clamped to it; 0 is none. */
  o.heartbeat_period = 100 * MS;
  o.heartbeat_epsilon = 10 * SEC;
  ck_assert_int_eq(mcp_disp_new(&d, &o, 0), 0);
  s = session(d, "node-a", NULL, 0, sid);
  for (int i = 0; i < 50; ++i) {
    mcp_tstamp p = heartbeat(d, sid, 0);
    ck_assert_uint_ge(p, 50 * MS);
    ck_assert_uint_lt(p, 150 * MS);
  }
  call_close(s);
  mcp_disp_del(d);
  o.heartbeat_epsilon = 0;
  ck_assert_int_eq(mcp_disp_new(&d, &o, 0), 0);
  s = session(d, "node-a", NULL, 0, sid);
  ck_assert_uint_eq(heartbeat(d, sid, 0), 100 * MS);
  call_close(s);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_session_expires_after_three_periods_without_heartbeat) {
  mcp_store *view = th_store(NULL);
  mcp_disp *d = disp_new(view, 1 * SEC, 0);
  char sid[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  call *a = by_session(d, ASSIGN, sid, 0);
  amsg_free(expect_assign(a, 0));
  /* Heartbeats keep it: 2.9 s, then 5.8 s. */
  heartbeat(d, sid, 2900 * MS);
  heartbeat(d, sid, 5800 * MS);
  ck_assert_uint_eq(mcp_stream_get_expiry(s->st), 8800 * MS);
  ck_assert_uint_eq(mcp_stream_get_expiry(a->st), 8800 * MS);
  ck_assert_uint_eq(mcp_disp_get_expiry(d), 8800 * MS);
  expect_idle(s, 8799 * MS);
  expect_idle(a, 8799 * MS);
  /* Issue 24 item 8: 3 periods after the last one the Session stream sends
   * the node DOWN "heartbeat failure", then ends NotFound "node not
   * registered" (markNodeNotReady, nodes.go:148). */
  smsg *sm = expect_smsg(s, 8800 * MS);
  ck_assert_str_eq(sm->session_id, sid);
  ck_assert_int_eq(sm->node->status->state, 1);
  ck_assert_str_eq(sm->node->status->message, MCP_DISP_ERR_HEARTBEAT);
  ck_assert_str_eq(sm->node->status->addr, "");
  ck_assert_str_eq(sm->node->description->hostname, "node-a");
  smsg_free(sm);
  expect_end(s, 8800 * MS, MCP_CODE_NOT_FOUND, MCP_DISP_ERR_NOT_REGISTERED);
  ck_assert_int_ge(a->wakes, 1); /* the Session stream's timer woke it */
  /* Assignments: at its next message. */
  expect_idle(a, 8800 * MS);
  put_task(view, "node-a", "t1", "v1", 8900 * MS);
  amsg_free(expect_assign(a, 8900 * MS));
  expect_end(a, 8900 * MS, MCP_CODE_NOT_FOUND, MCP_DISP_ERR_NOT_REGISTERED);
  call_close(s);
  call_close(a);
  /* Under TLS the node is known: NotFound for any id. */
  call *h = call_open(d, HEARTBEAT, "node-a", 9 * SEC);
  Docker__Swarmkit__V1__HeartbeatRequest hr =
      DOCKER__SWARMKIT__V1__HEARTBEAT_REQUEST__INIT;
  hr.session_id = sid;
  call_send(h, &hr.base, 9 * SEC);
  expect_end(h, 9 * SEC, MCP_CODE_NOT_FOUND, MCP_DISP_ERR_NOT_REGISTERED);
  call_close(h);
  /* Without TLS, the node of an id it forgot is unknown: INVALID_ARGUMENT
   * "session invalid". */
  expect_invalid(d, HEARTBEAT, sid, 9 * SEC);
  expect_invalid(d, ASSIGN, sid, 9 * SEC);
  expect_invalid(d, TASKS, sid, 9 * SEC);
  expect_invalid(d, UTS, sid, 9 * SEC);
  mcp_disp_stats st;
  mcp_disp_get_stats(d, &st);
  ck_assert_uint_eq(st.sessions, 0);
  ck_assert_uint_eq(st.sessions_expired, 1);
  ck_assert_uint_eq(st.invalid_session_calls, 5);
  ck_assert_uint_eq(st.streams, 0);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_session_without_streams_expires_through_the_registry) {
  mcp_store *view = th_store(NULL);
  mcp_disp *d = disp_new(view, 1 * SEC, 0);
  char sid[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  call_close(s); /* the stream went, the session lives on */
  ck_assert_ptr_nonnull(mcp_disp_node_session(d, "node-a", 1 * SEC));
  ck_assert_uint_eq(mcp_disp_get_expiry(d), 3 * SEC);
  mcp_disp_handle_expiry(d, 2999 * MS);
  ck_assert_uint_eq(heartbeat(d, sid, 2999 * MS), 1 * SEC);
  mcp_disp_handle_expiry(d, 5998 * MS);
  ck_assert_ptr_nonnull(mcp_disp_node_session(d, "node-a", 5998 * MS));
  mcp_disp_handle_expiry(d, 6 * SEC);
  ck_assert_ptr_null(mcp_disp_node_session(d, "node-a", 6 * SEC));
  ck_assert_uint_eq(mcp_disp_get_expiry(d), MCP_TSTAMP_MAX);
  expect_invalid(d, HEARTBEAT, sid, 6 * SEC);
  /* Several at once, one of them with a stream still open. */
  char s2[64];
  call *keep = session(d, "node-b", NULL, 7 * SEC, s2);
  call_close(session(d, "node-c", NULL, 7 * SEC, s2));
  call_close(session(d, "node-d", NULL, 7 * SEC, s2));
  call_close(session(d, "node-e", NULL, 8 * SEC, s2));
  mcp_disp_handle_expiry(d, 10 * SEC);
  mcp_disp_stats st;
  mcp_disp_get_stats(d, &st);
  ck_assert_uint_eq(st.sessions, 1);
  ck_assert_uint_eq(st.sessions_expired, 4);
  ck_assert_ptr_nonnull(mcp_disp_node_session(d, "node-e", 10 * SEC));
  ck_assert_int_ge(keep->wakes, 1);
  smsg_free(expect_smsg(keep, 10 * SEC));
  expect_end(keep, 10 * SEC, MCP_CODE_NOT_FOUND, MCP_DISP_ERR_NOT_REGISTERED);
  call_close(keep);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_unknown_session_is_invalid_argument) {
  mcp_store *view = th_store(NULL);
  mcp_disp *d = disp_new(view, 0, 0);
  expect_invalid(d, HEARTBEAT, "nope", 0);
  expect_invalid(d, ASSIGN, "nope", 0);
  expect_invalid(d, TASKS, "", 0);
  expect_invalid(d, UTS, "nope", 0);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

/* Bytes that are no request, for every method: the call ends
 * INVALID_ARGUMENT "malformed <Request>" and nothing else changes. */
START_TEST(test_malformed_request_of_every_method) {
  static const char *const names[] = {
      "SessionRequest", "HeartbeatRequest", "UpdateTaskStatusRequest",
      "TasksRequest", "AssignmentsRequest"};
  static const uint8_t junk[] = {0x0a, 0x05, 0x61, 0x62};
  mcp_store *view = th_store(NULL);
  put_task(view, "node-a", "t1", "v1", 0);
  mcp_disp *d = disp_new(view, 0, 0);
  char sid[64], want[80];
  call *s = session(d, "node-a", NULL, 0, sid);
  for (int k = SESSION; k <= ASSIGN; ++k) {
    call *c = call_open(d, k, NULL, 0);
    mcp_stream_recv(c->st, junk, sizeof junk, 0);
    snprintf(want, sizeof want, "malformed docker.swarmkit.v1.%s", names[k]);
    expect_end(c, 0, MCP_CODE_INVALID_ARGUMENT, want);
    call_close(c);
  }
  ck_assert_str_eq(mcp_disp_node_session(d, "node-a", 0), sid);
  mcp_disp_stats st;
  mcp_disp_get_stats(d, &st);
  ck_assert_uint_eq(st.sessions, 1);
  ck_assert_uint_eq(st.streams, 1);
  call_close(s);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

/* Requests that decode but cannot be served. */
START_TEST(test_session_request_fields_are_checked) {
  mcp_store *view = th_store(NULL);
  mcp_disp *d = disp_new(view, 0, 0);
  /* A hostname past 1024 bytes is no node id. */
  char big[1100];
  memset(big, 'n', sizeof big - 1);
  big[sizeof big - 1] = 0;
  Docker__Swarmkit__V1__SessionRequest r =
      DOCKER__SWARMKIT__V1__SESSION_REQUEST__INIT;
  Docker__Swarmkit__V1__NodeDescription desc =
      DOCKER__SWARMKIT__V1__NODE_DESCRIPTION__INIT;
  desc.hostname = big;
  r.description = &desc;
  call *c = call_open(d, SESSION, NULL, 0);
  call_send(c, &r.base, 0);
  expect_end(c, 0, MCP_CODE_INVALID_ARGUMENT, NULL);
  call_close(c);
  /* A session_id that is not UTF-8 (description {hostname "n"},
   * session_id "\xff"). */
  static const uint8_t badsid[] = {0x0a, 0x03, 0x0a, 0x01, 'n',
                                   0x12, 0x01, 0xff};
  c = call_open(d, SESSION, NULL, 0);
  mcp_stream_recv(c->st, badsid, sizeof badsid, 0);
  expect_end(c, 0, MCP_CODE_INVALID_ARGUMENT, "session_id is not UTF-8");
  call_close(c);
  ck_assert_ptr_null(mcp_disp_node_session(d, "n", 0));
  /* Naming the live session of another node does not take it over: a
   * session of its own. */
  char sa[64], sb[64];
  call *a = session(d, "node-a", NULL, 0, sa);
  call *b = session(d, "node-b", sa, 0, sb);
  ck_assert_str_ne(sa, sb);
  ck_assert_str_eq(mcp_disp_node_session(d, "node-a", 0), sa);
  ck_assert_str_eq(mcp_disp_node_session(d, "node-b", 0), sb);
  expect_idle(a, 0);
  call_close(a);
  call_close(b);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

/* An Assignments call whose peer goes away with split messages still
 * queued, and one whose session is replaced meanwhile: the queue goes
 * with the call. */
START_TEST(test_assignments_queue_dropped_with_the_call) {
  mcp_store *view = th_store(NULL);
  char id[32];
  for (int i = 0; i < 250; ++i) {
    snprintf(id, sizeof id, "t%03d", i);
    put_task(view, "node-a", id, "v1", 0);
  }
  mcp_disp *d = disp_new(view, 0, 0);
  char sid[64], sid2[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  call *a = by_session(d, ASSIGN, sid, 0);
  amsg_free(expect_assign(a, 0)); /* 2 more are queued */
  call_close(a);                  /* the peer vanished */
  a = by_session(d, ASSIGN, sid, 0);
  amsg_free(expect_assign(a, 0));
  call *s2 = session(d, "node-a", NULL, 1 * SEC, sid2);
  /* Replaced: the queued rest goes out (the next message and what was
   * split off with it), then the call ends. */
  amsg_free(expect_assign(a, 1 * SEC));
  amsg_free(expect_assign(a, 1 * SEC));
  expect_end(a, 1 * SEC, MCP_CODE_INVALID_ARGUMENT,
             MCP_DISP_ERR_SESSION_INVALID);
  call_close(a);
  call_close(s);
  mcp_disp_stats st;
  mcp_disp_get_stats(d, &st);
  ck_assert_uint_eq(st.streams, 1);
  call_close(s2);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

/* ------------------------------------------------------------------ */
/* UpdateTaskStatus                                                    */
/* ------------------------------------------------------------------ */

typedef struct tseen {
  char ids[8][32];
  int states[8];
  char msgs[8][32];
  int64_t secs[8];
  int n;
} tseen;

static int tsee(const mcp_disp_task_status *st, void *ud) {
  tseen *s = ud;
  ck_assert_int_lt(s->n, 8);
  snprintf(s->ids[s->n], 32, "%s", st->task_id);
  snprintf(s->msgs[s->n], 32, "%s", st->message);
  s->states[s->n] = st->state;
  ck_assert_str_eq(st->node_id, "node-a");
  Docker__Swarmkit__V1__TaskStatus *ts =
      docker__swarmkit__v1__task_status__unpack(NULL, st->status_len,
                                                st->status);
  ck_assert_ptr_nonnull(ts);
  ck_assert_int_eq((int)ts->state, st->state);
  s->secs[s->n] = ts->timestamp ? ts->timestamp->seconds : 0;
  docker__swarmkit__v1__task_status__free_unpacked(ts, NULL);
  s->n++;
  return 0;
}

/* The manager's task statuses now, into |s| (cleared first). */
static void statuses(mcp_disp *d, tseen *s) {
  memset(s, 0, sizeof *s);
  ck_assert_int_eq(mcp_disp_task_statuses(d, tsee, s), 0);
}

/* Opens UpdateTaskStatus with one update per id of |ids| (|n| of them,
 * at most 2), each {state, msg}, but the one at |statusless| (-1: none)
 * without a status; sends and half-closes. */
static call *report_open(mcp_disp *d, const char *sid, const char *const *ids,
                         size_t n, int state, const char *msg, int statusless,
                         mcp_tstamp ts) {
  Docker__Swarmkit__V1__UpdateTaskStatusRequest r =
      DOCKER__SWARMKIT__V1__UPDATE_TASK_STATUS_REQUEST__INIT;
  Docker__Swarmkit__V1__UpdateTaskStatusRequest__TaskStatusUpdate u[2] = {
      DOCKER__SWARMKIT__V1__UPDATE_TASK_STATUS_REQUEST__TASK_STATUS_UPDATE__INIT,
      DOCKER__SWARMKIT__V1__UPDATE_TASK_STATUS_REQUEST__TASK_STATUS_UPDATE__INIT};
  Docker__Swarmkit__V1__UpdateTaskStatusRequest__TaskStatusUpdate *up[2] = {
      &u[0], &u[1]};
  Docker__Swarmkit__V1__TaskStatus st = DOCKER__SWARMKIT__V1__TASK_STATUS__INIT;
  ck_assert_uint_le(n, 2);
  st.state = (Docker__Swarmkit__V1__TaskState)state;
  st.message = (char *)msg;
  for (size_t i = 0; i < n; ++i) {
    u[i].task_id = (char *)ids[i];
    u[i].status = (int)i == statusless ? NULL : &st;
  }
  r.session_id = (char *)sid;
  r.n_updates = n;
  r.updates = up;
  call *c = call_open(d, UTS, NULL, ts);
  call_send(c, &r.base, ts);
  mcp_stream_half_close(c->st, ts);
  return c;
}

/* Reports |task| in {state, msg}; the call ends with |expect_status|. */
static void report(mcp_disp *d, const char *sid, const char *task, int state,
                   const char *msg, mcp_tstamp ts, int expect_status) {
  call *c = report_open(d, sid, &task, 1, state, msg, -1, ts);
  if (expect_status == 0) {
    Docker__Swarmkit__V1__UpdateTaskStatusResponse *m = expect_msg(
        c, ts, &docker__swarmkit__v1__update_task_status_response__descriptor);
    docker__swarmkit__v1__update_task_status_response__free_unpacked(m, NULL);
  }
  expect_end(c, ts, expect_status, NULL);
  call_close(c);
}

START_TEST(test_update_task_status_keeps_the_latest_per_task) {
  mcp_store *view = th_store(NULL);
  put_task(view, "node-a", "t1", "v1", 0);
  put_task(view, "node-a", "t2", "v1", 0);
  mcp_disp *d = disp_new(view, 0, 0);
  char sid[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  report(d, sid, "t1", 256, "accepted", 0, 0);
  report(d, sid, "t1", 512, "running", 1, 0);
  report(d, sid, "t2", 704, "failed", 2, 0);
  tseen seen;
  statuses(d, &seen);
  ck_assert_int_eq(seen.n, 2);
  for (int i = 0; i < 2; ++i) {
    if (strcmp(seen.ids[i], "t1") == 0) {
      ck_assert_int_eq(seen.states[i], 512);
      ck_assert_str_eq(seen.msgs[i], "running");
    } else {
      ck_assert_str_eq(seen.ids[i], "t2");
      ck_assert_int_eq(seen.states[i], 704);
    }
  }
  mcp_disp_stats st;
  mcp_disp_get_stats(d, &st);
  ck_assert_uint_eq(st.status_updates, 3);
  ck_assert_uint_eq(st.task_statuses, 2);
  /* Unknown sessions are refused and change nothing. */
  report(d, "nope", "t2", 512, "x", 3, MCP_CODE_INVALID_ARGUMENT);
  mcp_disp_get_stats(d, &st);
  ck_assert_uint_eq(st.task_statuses, 2);
  call_close(s);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

/* Opens UpdateTaskStatus with two updates, both in |state|, the second
 * without a status when |second_status| is 0; sends and half-closes. */
static call *report_two(mcp_disp *d, const char *sid, const char *id0,
                        const char *id1, int state, int second_status,
                        mcp_tstamp ts) {
  const char *const ids[] = {id0, id1};
  return report_open(d, sid, ids, 2, state, "", second_status ? -1 : 1, ts);
}

/* Issue 24 item 7: swarmkit's UpdateTaskStatus (dispatcher.go:640-657)
 * skips a task it does not know and refuses the whole call,
 * PermissionDenied, for a task assigned to another node. */
START_TEST(test_update_task_status_for_another_nodes_task_is_denied) {
  mcp_store *view = th_store(NULL);
  put_task(view, "node-a", "t1", "v1", 0);
  put_task(view, "node-b", "tb", "v1", 0);
  mcp_disp *d = disp_new(view, 0, 0);
  char sid[64], sidb[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  call *sb = session(d, "node-b", NULL, 0, sidb);
  /* node-a reports node-b's task, together with its own: all refused. */
  call *c = report_two(d, sid, "t1", "tb", 704, 1, 0);
  expect_end(c, 0, MCP_CODE_PERMISSION_DENIED, MCP_DISP_ERR_NOT_ASSIGNED);
  call_close(c);
  /* In either order, and past an update without status. */
  c = report_two(d, sid, "tb", "t1", 704, 1, 0);
  expect_end(c, 0, MCP_CODE_PERMISSION_DENIED, MCP_DISP_ERR_NOT_ASSIGNED);
  call_close(c);
  {
    const char *const ids[] = {"t1", "tb"};
    c = report_open(d, sid, ids, 2, 704, "", 0, 0);
    expect_end(c, 0, MCP_CODE_PERMISSION_DENIED, MCP_DISP_ERR_NOT_ASSIGNED);
    call_close(c);
  }
  mcp_disp_stats st;
  mcp_disp_get_stats(d, &st);
  ck_assert_uint_eq(st.task_statuses, 0);
  ck_assert_uint_eq(st.status_updates, 0);
  /* A task nobody has (deleted meanwhile): skipped, the call is OK. */
  report(d, sid, "gone", 512, "", 1, 0);
  report(d, sid, "t1", 512, "", 1, 0);
  mcp_disp_get_stats(d, &st);
  ck_assert_uint_eq(st.task_statuses, 1);
  ck_assert_uint_eq(st.status_updates, 1);
  tseen seen;
  statuses(d, &seen);
  ck_assert_int_eq(seen.n, 1);
  ck_assert_str_eq(seen.ids[0], "t1");
  /* Once the task moved to node-a, node-a may report it. */
  del(view, "node-b", "task/tb", 2);
  put_task(view, "node-a", "tb", "v2", 2);
  report(d, sid, "tb", 512, "", 3, 0);
  mcp_disp_get_stats(d, &st);
  ck_assert_uint_eq(st.task_statuses, 2);
  call_close(s);
  call_close(sb);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

/* UpdateTaskStatus: a missing task id refuses the whole call (nothing
 * kept); an update without a status is skipped, as swarmkit does. */
START_TEST(test_update_task_status_bad_updates) {
  mcp_store *view = th_store(NULL);
  put_task(view, "node-a", "t1", "v1", 0);
  put_task(view, "node-a", "t2", "v1", 0);
  mcp_disp *d = disp_new(view, 0, 0);
  char sid[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  call *c = report_two(d, sid, "t1", "", 512, 1, 0); /* "": missing */
  expect_end(c, 0, MCP_CODE_INVALID_ARGUMENT, "task id missing or not UTF-8");
  call_close(c);
  mcp_disp_stats st;
  mcp_disp_get_stats(d, &st);
  ck_assert_uint_eq(st.task_statuses, 0);
  ck_assert_uint_eq(st.status_updates, 0);
  /* t2 without a status: skipped; t1 kept. */
  c = report_two(d, sid, "t1", "t2", 512, 0, 0);
  Docker__Swarmkit__V1__UpdateTaskStatusResponse *m = expect_msg(
      c, 0, &docker__swarmkit__v1__update_task_status_response__descriptor);
  docker__swarmkit__v1__update_task_status_response__free_unpacked(m, NULL);
  expect_end(c, 0, 0, NULL);
  call_close(c);
  tseen seen;
  statuses(d, &seen);
  ck_assert_int_eq(seen.n, 1);
  ck_assert_str_eq(seen.ids[0], "t1");
  call_close(s);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_update_task_status_is_bounded) {
  mcp_store *view = th_store(NULL);
  mcp_disp_options o;
  mcp_disp *d = NULL;
  mcp_disp_options_default(&o);
  o.view = view;
  o.rand = mcp_rand_splitmix64;
  o.rand_user_data = &seed;
  o.max_task_statuses = 2;
  ck_assert_int_eq(mcp_disp_new(&d, &o, 0), 0);
  put_task(view, "node-a", "t1", "v1", 0);
  put_task(view, "node-a", "t2", "v1", 0);
  put_task(view, "node-a", "t3", "v1", 0);
  char sid[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  report(d, sid, "t1", 512, "", 0, 0);
  report(d, sid, "t2", 512, "", 0, 0);
  report(d, sid, "t1", 576, "", 0, 0); /* known: fine */
  report(d, sid, "t3", 512, "", 0, MCP_CODE_RESOURCE_EXHAUSTED);
  mcp_disp_stats st;
  mcp_disp_get_stats(d, &st);
  ck_assert_uint_eq(st.task_statuses, 2);
  call_close(s);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Assignments                                                         */
/* ------------------------------------------------------------------ */

typedef struct sinfo {
  int n;
  char node[32], sid[64], results_in[16];
  size_t streams;
  uint64_t messages;
} sinfo;

static int see_session(const mcp_disp_session_info *s, void *ud) {
  sinfo *x = ud;
  x->n++;
  snprintf(x->node, sizeof x->node, "%s", s->node_id);
  snprintf(x->sid, sizeof x->sid, "%s", s->session_id);
  snprintf(x->results_in, sizeof x->results_in, "%s", s->results_in);
  x->streams = s->streams;
  x->messages = s->assignments_messages;
  return 0;
}

START_TEST(test_assignments_complete_then_incremental_chain) {
  mcp_store *view = th_store(NULL);
  put_task(view, "node-a", "t1", "v1", 0);
  put_task(view, "node-a", "t2", "v1", 0);
  put_secret(view, "node-a", "s1", 0);
  put_task(view, "node-b", "tb", "v1", 0);
  mcp_disp *d = disp_new(view, 0, 0);
  char sid[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  call *a = by_session(d, ASSIGN, sid, 0);
  amsg *m = expect_assign(a, 0);
  ck_assert_int_eq(m->type, MCP_DISP_COMPLETE);
  ck_assert_str_eq(m->applies_to, "");
  ck_assert_str_eq(m->results_in, "1");
  ck_assert_uint_eq(m->n_changes, 3);
  ck_assert(has_change(m, "U task/t1"));
  ck_assert(has_change(m, "U task/t2"));
  ck_assert(has_change(m, "U secret/s1"));
  /* The objects are the stored bytes. */
  for (size_t i = 0; i < m->n_changes; ++i) {
    const Docker__Swarmkit__V1__Assignment *as = m->changes[i]->assignment;
    if (as->item_case == DOCKER__SWARMKIT__V1__ASSIGNMENT__ITEM_TASK) {
      ck_assert_str_eq(as->task->node_id, "node-a");
      ck_assert_int_eq(as->task->status->state, 192);
    }
  }
  amsg_free(m);
  expect_idle(a, 0);
  /* A change for another node: nothing. */
  put_task(view, "node-b", "tb2", "v1", 1 * SEC);
  expect_idle(a, 1 * SEC);
  /* Changes: INCREMENTAL chained to the previous results_in. */
  put_task(view, "node-a", "t3", "v1", 2 * SEC);
  put_task(view, "node-a", "t2", "v2", 2 * SEC);
  del(view, "node-a", "task/t1", 2 * SEC);
  m = expect_assign(a, 2 * SEC);
  ck_assert_int_eq(m->type, MCP_DISP_INCREMENTAL);
  ck_assert_str_eq(m->applies_to, "1");
  ck_assert_str_eq(m->results_in, "2");
  ck_assert_uint_eq(m->n_changes, 3);
  ck_assert(has_change(m, "U task/t3"));
  ck_assert(has_change(m, "U task/t2"));
  ck_assert(has_change(m, "R task/t1"));
  for (size_t i = 0; i < m->n_changes; ++i) {
    const Docker__Swarmkit__V1__Assignment *as = m->changes[i]->assignment;
    if ((int)m->changes[i]->action == MCP_DISP_REMOVE) {
      /* REMOVE carries the id only. */
      ck_assert_str_eq(as->task->node_id, "");
      ck_assert_ptr_null(as->task->status);
    } else if (strcmp(as->task->id, "t2") == 0) {
      ck_assert_str_eq(as->task->spec->container->image, "v2");
    }
  }
  amsg_free(m);
  expect_idle(a, 2 * SEC);
  /* An identical re-upsert is no change. */
  put_task(view, "node-a", "t3", "v1", 3 * SEC);
  expect_idle(a, 3 * SEC);
  mcp_disp_stats st;
  mcp_disp_get_stats(d, &st);
  ck_assert_uint_eq(st.assignments_messages, 2);
  sinfo si = {0};
  ck_assert_int_eq(mcp_disp_sessions(d, see_session, &si), 0);
  ck_assert_int_eq(si.n, 1);
  ck_assert_str_eq(si.node, "node-a");
  ck_assert_str_eq(si.sid, sid);
  ck_assert_str_eq(si.results_in, "2");
  ck_assert_uint_eq(si.streams, 2);
  ck_assert_uint_eq(si.messages, 2);
  ck_assert_uint_eq(st.assignments_changes, 6);
  call_close(a);
  call_close(s);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_assignments_first_message_at_once_even_when_empty) {
  mcp_store *view = th_store(NULL);
  mcp_disp *d = disp_new(view, 0, 100 * MS);
  char sid[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  call *a = by_session(d, ASSIGN, sid, 0);
  amsg *m = expect_assign(a, 0);
  ck_assert_int_eq(m->type, MCP_DISP_COMPLETE);
  ck_assert_uint_eq(m->n_changes, 0);
  ck_assert_str_eq(m->results_in, "1");
  amsg_free(m);
  /* The node's collection appears after a quiet second: at once (the
   * debounce's leading edge). */
  put_task(view, "node-a", "t1", "v1", 1 * SEC);
  m = expect_assign(a, 1 * SEC);
  ck_assert_int_eq(m->type, MCP_DISP_INCREMENTAL);
  ck_assert_str_eq(m->applies_to, "1");
  ck_assert_uint_eq(m->n_changes, 1);
  char prev[32];
  snprintf(prev, sizeof prev, "%s", m->results_in);
  amsg_free(m);
  /* What follows within the window is batched until quiet. */
  put_task(view, "node-a", "t2", "v1", 1050 * MS);
  expect_idle(a, 1050 * MS);
  put_task(view, "node-a", "t3", "v1", 1100 * MS);
  expect_idle(a, 1100 * MS);
  ck_assert_uint_eq(mcp_stream_get_expiry(a->st), 1200 * MS);
  expect_idle(a, 1199 * MS);
  m = expect_assign(a, 1200 * MS);
  ck_assert_int_eq(m->type, MCP_DISP_INCREMENTAL);
  ck_assert_str_eq(m->applies_to, prev);
  ck_assert_uint_eq(m->n_changes, 2);
  amsg_free(m);
  call_close(a);
  call_close(s);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_assignments_split_at_100_changes) {
  mcp_store *view = th_store(NULL);
  char id[32];
  for (int i = 0; i < 250; ++i) {
    snprintf(id, sizeof id, "t%03d", i);
    put_task(view, "node-a", id, "v1", 0);
  }
  mcp_disp *d = disp_new(view, 0, 0);
  char sid[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  call *a = by_session(d, ASSIGN, sid, 0);
  const size_t sizes[] = {100, 100, 50};
  char prev[16] = "";
  for (int k = 0; k < 3; ++k) {
    amsg *m = expect_assign(a, 0);
    ck_assert_int_eq(m->type, k == 0 ? MCP_DISP_COMPLETE : MCP_DISP_INCREMENTAL);
    ck_assert_str_eq(m->applies_to, prev);
    ck_assert_uint_eq(m->n_changes, sizes[k]);
    snprintf(prev, sizeof prev, "%s", m->results_in);
    amsg_free(m);
  }
  ck_assert_str_eq(prev, "3");
  expect_idle(a, 0);
  /* 150 removals: 100 + 50, chained. */
  for (int i = 0; i < 150; ++i) {
    snprintf(id, sizeof id, "task/t%03d", i);
    del(view, "node-a", id, 1 * SEC);
  }
  amsg *m = expect_assign(a, 1 * SEC);
  ck_assert_str_eq(m->applies_to, "3");
  ck_assert_uint_eq(m->n_changes, 100);
  ck_assert(has_change(m, "R task/t000"));
  amsg_free(m);
  m = expect_assign(a, 1 * SEC);
  ck_assert_str_eq(m->applies_to, "4");
  ck_assert_str_eq(m->results_in, "5");
  ck_assert_uint_eq(m->n_changes, 50);
  amsg_free(m);
  expect_idle(a, 1 * SEC);
  call_close(a);
  call_close(s);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_assignments_secret_shared_by_two_tasks) {
  /* The adapter keeps a secret in node/<id> while a task references it;
   * the session sends a REMOVE when the view drops it, not before. */
  mcp_store *view = th_store(NULL);
  put_task(view, "node-a", "t1", "v1", 0);
  put_task(view, "node-a", "t2", "v1", 0);
  put_secret(view, "node-a", "db-pass", 0);
  mcp_disp *d = disp_new(view, 0, 0);
  char sid[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  call *a = by_session(d, ASSIGN, sid, 0);
  amsg *m = expect_assign(a, 0);
  ck_assert_uint_eq(m->n_changes, 3);
  amsg_free(m);
  del(view, "node-a", "task/t1", 1 * SEC);
  m = expect_assign(a, 1 * SEC);
  ck_assert_uint_eq(m->n_changes, 1);
  ck_assert_str_eq(change_str(m, 0), "R task/t1");
  amsg_free(m);
  del(view, "node-a", "task/t2", 2 * SEC);
  del(view, "node-a", "secret/db-pass", 2 * SEC);
  m = expect_assign(a, 2 * SEC);
  ck_assert_uint_eq(m->n_changes, 2);
  ck_assert(has_change(m, "R task/t2"));
  ck_assert(has_change(m, "R secret/db-pass"));
  amsg_free(m);
  call_close(a);
  call_close(s);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_assignments_collection_removed_and_back) {
  mcp_store *view = th_store(NULL);
  put_task(view, "node-a", "t1", "v1", 0);
  put_secret(view, "node-a", "s1", 0);
  put(view, "node-a", "junk", "v1", MCP_DISP_TYPE_TASK,
      (const uint8_t *)"", 0, 0);
  mcp_disp *d = disp_new(view, 0, 0);
  char sid[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  call *a = by_session(d, ASSIGN, sid, 0);
  amsg *m = expect_assign(a, 0);
  ck_assert_uint_eq(m->n_changes, 2); /* "junk" is no object name */
  amsg_free(m);
  ck_assert_int_eq(mcp_store_remove_collection(view, "node/node-a", 1 * SEC),
                   1);
  m = expect_assign(a, 1 * SEC);
  ck_assert_int_eq(m->type, MCP_DISP_INCREMENTAL);
  ck_assert_uint_eq(m->n_changes, 2);
  ck_assert(has_change(m, "R task/t1"));
  ck_assert(has_change(m, "R secret/s1"));
  amsg_free(m);
  expect_idle(a, 1 * SEC);
  put_task(view, "node-a", "t1", "v1", 2 * SEC);
  m = expect_assign(a, 2 * SEC);
  ck_assert_int_eq(m->type, MCP_DISP_INCREMENTAL);
  ck_assert_uint_eq(m->n_changes, 1);
  ck_assert_str_eq(change_str(m, 0), "U task/t1");
  amsg_free(m);
  call_close(a);
  call_close(s);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_assignments_only_the_node_changed_hears) {
  /* Many agents on one manager, a change to one node: only that node's
   * stream sends (nothing for the others: 0 bytes to uninvolved nodes). */
  enum { N = 1000 };
  mcp_store *view = th_store(NULL);
  mcp_disp *d = disp_new(view, 0, 0);
  call *s[N], *a[N];
  char node[32], sid[64];
  for (int i = 0; i < N; ++i) {
    snprintf(node, sizeof node, "node-%d", i);
    put_task(view, node, "t", "v1", 0);
    s[i] = session(d, node, NULL, 0, sid);
    a[i] = by_session(d, ASSIGN, sid, 0);
    amsg_free(expect_assign(a[i], 0));
  }
  put_task(view, "node-7", "t-new", "v1", 1 * SEC);
  int sent = 0;
  for (int i = 0; i < N; ++i) {
    uint8_t *b = NULL;
    size_t n;
    if (pump(a[i], 1 * SEC, &b, &n, NULL, NULL) == MCP_STREAM_SEND) {
      ck_assert_int_eq(i, 7);
      sent++;
    }
    free(b);
    expect_idle(s[i], 1 * SEC);
  }
  ck_assert_int_eq(sent, 1);
  for (int i = 0; i < N; ++i) {
    call_close(a[i]);
    call_close(s[i]);
  }
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_tasks_streams_the_full_list_on_every_change) {
  mcp_store *view = th_store(NULL);
  put_task(view, "node-a", "t1", "v1", 0);
  put_secret(view, "node-a", "s1", 0);
  mcp_disp *d = disp_new(view, 0, 0);
  char sid[64];
  call *s = session(d, "node-a", NULL, 0, sid);
  call *t = by_session(d, TASKS, sid, 0);
  Docker__Swarmkit__V1__TasksMessage *m =
      expect_msg(t, 0, &docker__swarmkit__v1__tasks_message__descriptor);
  ck_assert_uint_eq(m->n_tasks, 1);
  ck_assert_str_eq(m->tasks[0]->id, "t1");
  docker__swarmkit__v1__tasks_message__free_unpacked(m, NULL);
  expect_idle(t, 0);
  put_secret(view, "node-a", "s2", 1 * SEC); /* no task changed */
  expect_idle(t, 1 * SEC);
  put_task(view, "node-a", "t2", "v1", 2 * SEC);
  m = expect_msg(t, 2 * SEC, &docker__swarmkit__v1__tasks_message__descriptor);
  ck_assert_uint_eq(m->n_tasks, 2);
  docker__swarmkit__v1__tasks_message__free_unpacked(m, NULL);
  del(view, "node-a", "task/t1", 3 * SEC);
  del(view, "node-a", "task/t2", 3 * SEC);
  m = expect_msg(t, 3 * SEC, &docker__swarmkit__v1__tasks_message__descriptor);
  ck_assert_uint_eq(m->n_tasks, 0);
  docker__swarmkit__v1__tasks_message__free_unpacked(m, NULL);
  call_close(t);
  call_close(s);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

/* ------------------------------------------------------------------ */
/* A tiny transport: an agent's client def against the manager         */
/* ------------------------------------------------------------------ */

typedef struct link {
  mcp_stream *cli, *srv;
} link_t;

typedef struct net {
  mcp_disp *d;
  const mcp_client_def *def;
  link_t l[MCP_DISP_NSLOTS];
  int ended_status[MCP_DISP_NSLOTS];
  int down; /* the manager is unreachable: calls fail UNAVAILABLE */
} net;

static void net_end(net *n, size_t slot, int status, const char *details,
                    mcp_tstamp ts) {
  mcp_stream_del(n->l[slot].cli);
  mcp_stream_del(n->l[slot].srv);
  n->l[slot].cli = n->l[slot].srv = NULL;
  n->ended_status[slot] = status;
  n->def->ended(n->def->user_data, slot, status, details, ts);
}

static const mcp_service_def *net_service(net *n, const char *method) {
  const mcp_service_def *defs;
  size_t k = mcp_disp_services(n->d, &defs);
  for (size_t i = 0; i < k; ++i) {
    if (strcmp(defs[i].method, method) == 0) {
      return &defs[i];
    }
  }
  return NULL;
}

/* Runs everything due at |ts| until nothing moves. */
static void net_run(net *n, mcp_tstamp ts) {
  for (int moved = 1, rounds = 0; moved; ++rounds) {
    ck_assert_int_lt(rounds, 10000);
    moved = 0;
    for (size_t i = 0; i < n->def->nslots; ++i) {
      link_t *l = &n->l[i];
      if (!l->cli) {
        mcp_stream *cs;
        if (n->def->open(n->def->user_data, i, ts, &cs) == 1) {
          moved = 1;
          if (n->down) {
            mcp_stream_del(cs);
            n->def->ended(n->def->user_data, i, MCP_CODE_UNAVAILABLE,
                          "connection refused", ts);
            continue;
          }
          const mcp_service_def *sd =
              net_service(n, n->def->method(n->def->user_data, i));
          mcp_peer_info peer = {"127.0.0.1:1", 0, NULL, NULL, 0};
          ck_assert_ptr_nonnull(sd);
          l->cli = cs;
          ck_assert_int_eq(sd->open(sd->user_data, &peer, ts, &l->srv), 0);
        }
        continue;
      }
      mcp_msg *m;
      int st;
      const char *dt;
      int a = mcp_stream_pump(l->cli, ts, 1, &m, &st, &dt);
      if (a == MCP_STREAM_SEND) {
        uint8_t *b = malloc(mcp_msg_len(m) + 1);
        mcp_msg_flatten(m, b);
        mcp_stream_recv(l->srv, b, mcp_msg_len(m), ts);
        free(b);
        mcp_msg_free(m);
        moved = 1;
      } else if (a == MCP_STREAM_HALF_CLOSE) {
        mcp_stream_half_close(l->srv, ts);
        moved = 1;
      } else if (a == MCP_STREAM_END) {
        /* The client cancels: the peer sees CANCELLED. */
        net_end(n, i, st, dt, ts);
        moved = 1;
        continue;
      }
      a = mcp_stream_pump(l->srv, ts, 1, &m, &st, &dt);
      if (a == MCP_STREAM_SEND) {
        uint8_t *b = malloc(mcp_msg_len(m) + 1);
        mcp_msg_flatten(m, b);
        mcp_stream_recv(l->cli, b, mcp_msg_len(m), ts);
        free(b);
        mcp_msg_free(m);
        moved = 1;
      } else if (a == MCP_STREAM_END) {
        char dcopy[256];
        snprintf(dcopy, sizeof dcopy, "%s", dt);
        net_end(n, i, st, dcopy, ts);
        moved = 1;
      }
    }
  }
}

static void net_close(net *n) {
  for (size_t i = 0; i < MCP_DISP_NSLOTS; ++i) {
    if (n->l[i].cli) {
      mcp_stream_del(n->l[i].cli);
      mcp_stream_del(n->l[i].srv);
      n->l[i].cli = n->l[i].srv = NULL;
    }
  }
}

typedef struct events {
  int n;
  int types[16];
  char applies[16][16], results[16][16];
  size_t nchanges[16], total[16];
  char first[16][64];
} events;

static void on_msg(const mcp_disp_event *ev, void *ud) {
  events *e = ud;
  if (e->n >= 16) {
    return;
  }
  e->types[e->n] = ev->type;
  snprintf(e->applies[e->n], 16, "%s", ev->applies_to);
  snprintf(e->results[e->n], 16, "%s", ev->results_in);
  e->nchanges[e->n] = ev->nchanges;
  e->total[e->n] = ev->total;
  if (ev->nchanges) {
    snprintf(e->first[e->n], 64, "%s %s/%s",
             ev->changes[0].action ? "REMOVE" : "UPDATE",
             mcp_disp_kind_name(ev->changes[0].kind), ev->changes[0].id);
  }
  e->n++;
}

static mcp_disp_agent *agent_new(const char *node, events *e, int report) {
  mcp_disp_agent_options o;
  mcp_disp_agent *a = NULL;
  mcp_disp_agent_options_default(&o);
  o.node_id = node;
  o.on_message = on_msg;
  o.user_data = e;
  o.report_state = report;
  o.rand = mcp_rand_splitmix64;
  o.rand_user_data = &seed;
  o.wall_offset = (int64_t)1700000000 * (int64_t)SEC;
  ck_assert_int_eq(mcp_disp_agent_new(&a, &o, 0), 0);
  return a;
}

/* t<id> on node-a, desired SHUTDOWN, the manager's status ASSIGNED. */
static uint8_t *task_shutdown_bytes(const char *id, size_t *len) {
  uint8_t *b = task_bytes(id, "node-a", 192, "nginx:2", len);
  Docker__Swarmkit__V1__Task *t =
      docker__swarmkit__v1__task__unpack(NULL, *len, b);
  free(b);
  t->desired_state = (Docker__Swarmkit__V1__TaskState)640;
  *len = docker__swarmkit__v1__task__get_packed_size(t);
  b = malloc(*len);
  docker__swarmkit__v1__task__pack(t, b);
  docker__swarmkit__v1__task__free_unpacked(t, NULL);
  return b;
}

START_TEST(test_agent_against_the_manager) {
  mcp_store *view = th_store(NULL);
  put_task(view, "node-a", "t1", "v1", 0);
  put_secret(view, "node-a", "s1", 0);
  mcp_disp *d = disp_new(view, 2 * SEC, 0);
  events e = {0};
  mcp_disp_agent *ag = agent_new("node-a", &e, 512);
  net n = {d, mcp_disp_agent_client_def(ag), {{0}}, {0}, 0};
  net_run(&n, 0);
  ck_assert_ptr_nonnull(mcp_disp_agent_session_id(ag));
  ck_assert_str_eq(mcp_disp_agent_session_id(ag),
                   mcp_disp_node_session(d, "node-a", 0));
  ck_assert_uint_eq(mcp_disp_agent_period(ag), 2 * SEC);
  ck_assert_int_eq(e.n, 1);
  ck_assert_int_eq(e.types[0], MCP_DISP_COMPLETE);
  ck_assert_str_eq(e.results[0], "1");
  ck_assert_uint_eq(e.total[0], 2);
  ck_assert_uint_eq(mcp_disp_agent_count(ag), 2);
  const uint8_t *obj;
  size_t len;
  ck_assert_int_eq(mcp_disp_agent_get(ag, MCP_DISP_TASK, "t1", &obj, &len), 1);
  Docker__Swarmkit__V1__Task *t =
      docker__swarmkit__v1__task__unpack(NULL, len, obj);
  ck_assert_str_eq(t->node_id, "node-a");
  docker__swarmkit__v1__task__free_unpacked(t, NULL);
  /* --report-status RUNNING closed the loop: issue 24 item 10, every state
   * the controller passes (ACCEPTED, PREPARING, READY, STARTING, RUNNING),
   * one call each, with its message and the agent's wall clock. */
  tseen seen;
  statuses(d, &seen);
  ck_assert_int_eq(seen.n, 1);
  ck_assert_str_eq(seen.ids[0], "t1");
  ck_assert_int_eq(seen.states[0], 512);
  ck_assert_str_eq(seen.msgs[0], "started");
  ck_assert_int_eq(seen.secs[0], 1700000000);
  mcp_disp_stats ds;
  mcp_disp_get_stats(d, &ds);
  ck_assert_uint_eq(ds.status_updates, 5);
  /* A change flows as INCREMENTAL. */
  put_task(view, "node-a", "t2", "v1", 1 * SEC);
  net_run(&n, 1 * SEC);
  ck_assert_int_eq(e.n, 2);
  ck_assert_int_eq(e.types[1], MCP_DISP_INCREMENTAL);
  ck_assert_str_eq(e.applies[1], "1");
  ck_assert_str_eq(e.first[1], "UPDATE task/t2");
  ck_assert_uint_eq(e.total[1], 3);
  /* Heartbeats at the period answered keep the session for a long time. */
  const char *sid0 = mcp_disp_agent_session_id(ag);
  char sid[64];
  snprintf(sid, sizeof sid, "%s", sid0);
  for (mcp_tstamp ts = 1 * SEC; ts <= 60 * SEC; ts += 500 * MS) {
    net_run(&n, ts);
  }
  ck_assert_str_eq(mcp_disp_agent_session_id(ag), sid);
  mcp_disp_agent_stats as;
  mcp_disp_agent_get_stats(ag, &as);
  ck_assert_uint_ge(as.heartbeats, 29);
  ck_assert_uint_eq(as.sessions, 1);
  ck_assert_uint_eq(as.status_reports, 10);
  /* Desired SHUTDOWN of a RUNNING task: SHUTDOWN "shutdown", whatever the
   * manager's copy of its status says (controller.go:295). */
  size_t sl;
  uint8_t *sb = task_shutdown_bytes("t1", &sl);
  put(view, "node/node-a", "task/t1", "v3", MCP_DISP_TYPE_TASK, sb, sl,
      61 * SEC);
  free(sb);
  net_run(&n, 61 * SEC);
  statuses(d, &seen);
  for (int i = 0; i < seen.n; ++i) {
    if (strcmp(seen.ids[i], "t1") == 0) {
      ck_assert_int_eq(seen.states[i], 640);
      ck_assert_str_eq(seen.msgs[i], "shutdown");
    }
  }
  mcp_disp_agent_get_stats(ag, &as);
  ck_assert_uint_eq(as.status_reports, 11);
  net_close(&n);
  mcp_disp_agent_del(ag);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

/* Issue 24 item 10: --report-status walks swarmkit's controller
 * (controller.go:230-330) one state per call, stops at the target, and the
 * states the agent reached survive the manager re-sending the task. */
START_TEST(test_agent_reports_each_controller_state) {
  mcp_store *view = th_store(NULL);
  put_task(view, "node-a", "t1", "v1", 0);
  mcp_disp *d = disp_new(view, 2 * SEC, 0);
  events e = {0};
  mcp_disp_agent *ag = agent_new("node-a", &e, 576); /* COMPLETE */
  net n = {d, mcp_disp_agent_client_def(ag), {{0}}, {0}, 0};
  net_run(&n, 0);
  mcp_disp_stats ds;
  mcp_disp_get_stats(d, &ds);
  ck_assert_uint_eq(ds.status_updates, 6);
  tseen seen;
  statuses(d, &seen);
  ck_assert_int_eq(seen.states[0], 576);
  ck_assert_str_eq(seen.msgs[0], "finished");
  /* The manager re-sends t1 (a new spec, its own status ASSIGNED): the
   * agent's status is canonical (agent/task.go:205); nothing moves it, so
   * it is reported again as it stands, with the time it was reached. */
  size_t len;
  uint8_t *b = task_bytes("t1", "node-a", 192, "nginx:2", &len);
  put(view, "node/node-a", "task/t1", "v2", MCP_DISP_TYPE_TASK, b, len,
      1 * SEC);
  free(b);
  net_run(&n, 1 * SEC);
  ck_assert_int_eq(e.n, 2);
  mcp_disp_get_stats(d, &ds);
  ck_assert_uint_eq(ds.status_updates, 7);
  statuses(d, &seen);
  ck_assert_int_eq(seen.states[0], 576);
  ck_assert_str_eq(seen.msgs[0], "finished");
  ck_assert_int_eq(seen.secs[0], 1700000000); /* reached at ts 0 */
  /* Desired SHUTDOWN of a COMPLETE task: the controller does nothing
   * (controller.go:305), the status is reported as it stands. */
  b = task_shutdown_bytes("t1", &len);
  put(view, "node/node-a", "task/t1", "v3", MCP_DISP_TYPE_TASK, b, len,
      1500 * MS);
  free(b);
  net_run(&n, 1500 * MS);
  statuses(d, &seen);
  ck_assert_int_eq(seen.states[0], 576);
  mcp_disp_get_stats(d, &ds);
  ck_assert_uint_eq(ds.status_updates, 8);
  /* A new task is walked in its turn. */
  put_task(view, "node-a", "t2", "v1", 2 * SEC);
  net_run(&n, 2 * SEC);
  mcp_disp_get_stats(d, &ds);
  ck_assert_uint_eq(ds.status_updates, 14);
  net_close(&n);
  mcp_disp_agent_del(ag);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_agent_reports_every_task_in_calls_of_1000) {
  mcp_store *view = th_store(NULL);
  char id[32];
  for (int i = 0; i < 1203; ++i) {
    snprintf(id, sizeof id, "t%d", i);
    put_task(view, "node-a", id, "v1", 0);
  }
  mcp_disp *d = disp_new(view, 0, 0);
  events e = {0};
  mcp_disp_agent *ag = agent_new("node-a", &e, 256);
  net n = {d, mcp_disp_agent_client_def(ag), {{0}}, {0}, 0};
  net_run(&n, 0);
  ck_assert_uint_eq(mcp_disp_agent_count(ag), 1203);
  mcp_disp_stats st;
  mcp_disp_get_stats(d, &st);
  ck_assert_uint_eq(st.task_statuses, 1203);
  ck_assert_uint_eq(st.status_updates, 1203);
  ck_assert_uint_eq(st.assignments_messages, 13); /* 100 per message */
  mcp_disp_agent_stats as;
  mcp_disp_agent_get_stats(ag, &as);
  ck_assert_uint_eq(as.status_reports, 1203);
  ck_assert_uint_eq(as.messages, 13);
  net_close(&n);
  mcp_disp_agent_del(ag);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_agent_node_restart_gets_a_new_session) {
  mcp_store *view = th_store(NULL);
  put_task(view, "node-a", "t1", "v1", 0);
  mcp_disp *d = disp_new(view, 0, 0);
  events e1 = {0}, e2 = {0};
  mcp_disp_agent *a1 = agent_new("node-a", &e1, -1);
  net n1 = {d, mcp_disp_agent_client_def(a1), {{0}}, {0}, 0};
  net_run(&n1, 0);
  char sid1[64];
  snprintf(sid1, sizeof sid1, "%s", mcp_disp_agent_session_id(a1));
  /* The node restarts: a new agent process, the old connection lingers. */
  mcp_disp_agent *a2 = agent_new("node-a", &e2, -1);
  net n2 = {d, mcp_disp_agent_client_def(a2), {{0}}, {0}, 0};
  net_run(&n2, 1 * SEC);
  ck_assert_str_ne(mcp_disp_agent_session_id(a2), sid1);
  ck_assert_int_eq(e2.n, 1);
  ck_assert_int_eq(e2.types[0], MCP_DISP_COMPLETE);
  ck_assert_uint_eq(e2.total[0], 1);
  /* The old agent's calls end; it starts over after its backoff. */
  net_run(&n1, 1 * SEC);
  ck_assert_int_eq(n1.ended_status[MCP_DISP_SLOT_SESSION],
                   MCP_CODE_INVALID_ARGUMENT);
  ck_assert_ptr_null(mcp_disp_agent_session_id(a1));
  mcp_disp_agent_stats st;
  mcp_disp_agent_get_stats(a1, &st);
  ck_assert_uint_eq(st.session_errors, 1);
  ck_assert_uint_eq(mcp_disp_agent_count(a1), 1); /* held stays */
  net_close(&n1);
  net_close(&n2);
  mcp_disp_agent_del(a1);
  mcp_disp_agent_del(a2);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_agent_new_session_after_backoff_on_error) {
  mcp_store *view = th_store(NULL);
  mcp_disp *d = disp_new(view, 1 * SEC, 0);
  events e = {0};
  mcp_disp_agent *ag = agent_new("node-a", &e, -1);
  const mcp_client_def *def = mcp_disp_agent_client_def(ag);
  net n = {d, def, {{0}}, {0}, 1};
  net_run(&n, 0); /* refused: a session error */
  ck_assert_ptr_null(mcp_disp_agent_session_id(ag));
  mcp_tstamp retry = def->get_expiry(def->user_data);
  ck_assert_uint_gt(retry, 0);
  ck_assert_uint_le(retry, 2 * SEC); /* 1 s +- 20% */
  mcp_stream *st;
  ck_assert_int_eq(def->open(def->user_data, MCP_DISP_SLOT_SESSION, retry - 1,
                             &st),
                   0);
  n.down = 0;
  net_run(&n, retry);
  ck_assert_ptr_nonnull(mcp_disp_agent_session_id(ag));
  ck_assert_int_eq(e.n, 1);
  /* The manager forgets the session (expiry while the agent was cut
   * off): its calls end, and the agent starts a new session. */
  char sid[64];
  snprintf(sid, sizeof sid, "%s", mcp_disp_agent_session_id(ag));
  mcp_disp_handle_expiry(d, retry + 10 * SEC);
  net_run(&n, retry + 10 * SEC);
  ck_assert(mcp_disp_agent_session_id(ag) == NULL ||
            strcmp(mcp_disp_agent_session_id(ag), sid) != 0);
  mcp_tstamp later = def->get_expiry(def->user_data);
  net_run(&n, later);
  ck_assert_ptr_nonnull(mcp_disp_agent_session_id(ag));
  ck_assert_str_ne(mcp_disp_agent_session_id(ag), sid);
  ck_assert_int_eq(e.n, 2);
  ck_assert_int_eq(e.types[1], MCP_DISP_COMPLETE);
  net_close(&n);
  mcp_disp_agent_del(ag);
  mcp_disp_del(d);
  mcp_store_del(view);
}
END_TEST

/* ---- the agent's Assignments stream, fed by hand ---- */

typedef struct agent_rig {
  mcp_disp_agent *a;
  const mcp_client_def *def;
  mcp_stream *sess, *asg;
  events e;
} agent_rig;

static const mcp_mem *rig_mem; /* the agent's allocator (NULL: libc) */
static int rig_report = -1;    /* the agent's report_state */

static void rig_open(agent_rig *r) {
  memset(r, 0, sizeof *r);
  if (rig_mem) {
    mcp_disp_agent_options o;
    mcp_disp_agent_options_default(&o);
    o.node_id = "node-a";
    o.mem = rig_mem;
    o.on_message = on_msg;
    o.user_data = &r->e;
    ck_assert_int_eq(mcp_disp_agent_new(&r->a, &o, 0), 0);
  } else {
    r->a = agent_new("node-a", &r->e, rig_report);
  }
  r->def = mcp_disp_agent_client_def(r->a);
  ck_assert_int_eq(r->def->open(r->def->user_data, MCP_DISP_SLOT_SESSION, 0,
                                &r->sess),
                   1);
  Docker__Swarmkit__V1__SessionMessage m =
      DOCKER__SWARMKIT__V1__SESSION_MESSAGE__INIT;
  m.session_id = "sid-1";
  size_t n = docker__swarmkit__v1__session_message__get_packed_size(&m);
  uint8_t b[64];
  docker__swarmkit__v1__session_message__pack(&m, b);
  mcp_stream_recv(r->sess, b, n, 0);
  ck_assert_str_eq(mcp_disp_agent_session_id(r->a), "sid-1");
  ck_assert_int_eq(r->def->open(r->def->user_data, MCP_DISP_SLOT_ASSIGNMENTS,
                                0, &r->asg),
                   1);
  mcp_msg *msg;
  int st;
  const char *dt;
  ck_assert_int_eq(mcp_stream_pump(r->asg, 0, 1, &msg, &st, &dt),
                   MCP_STREAM_SEND);
  Docker__Swarmkit__V1__AssignmentsRequest *req;
  uint8_t rb[64];
  mcp_msg_flatten(msg, rb);
  req = docker__swarmkit__v1__assignments_request__unpack(NULL,
                                                          mcp_msg_len(msg), rb);
  ck_assert_str_eq(req->session_id, "sid-1");
  docker__swarmkit__v1__assignments_request__free_unpacked(req, NULL);
  mcp_msg_free(msg);
}

static void rig_close(agent_rig *r) {
  if (r->asg) {
    mcp_stream_del(r->asg);
  }
  if (r->sess) {
    mcp_stream_del(r->sess);
  }
  mcp_disp_agent_del(r->a);
}

/* Sends an AssignmentsMessage with one task UPDATE per id in |up| and one
 * REMOVE per id in |rm|. */
static void rig_send(agent_rig *r, int type, const char *applies,
                     const char *results, const char *const *up,
                     const char *const *rm) {
  amsg m = DOCKER__SWARMKIT__V1__ASSIGNMENTS_MESSAGE__INIT;
  Docker__Swarmkit__V1__AssignmentChange ch[8], *chp[8];
  Docker__Swarmkit__V1__Assignment as[8];
  Docker__Swarmkit__V1__Task t[8];
  size_t n = 0;
  for (int k = 0; k < 2; ++k) {
    const char *const *ids = k ? rm : up;
    for (size_t i = 0; ids && ids[i]; ++i, ++n) {
      docker__swarmkit__v1__assignment_change__init(&ch[n]);
      docker__swarmkit__v1__assignment__init(&as[n]);
      docker__swarmkit__v1__task__init(&t[n]);
      t[n].id = (char *)ids[i];
      t[n].node_id = k ? "" : "node-a";
      t[n].desired_state = (Docker__Swarmkit__V1__TaskState)512;
      as[n].item_case = DOCKER__SWARMKIT__V1__ASSIGNMENT__ITEM_TASK;
      as[n].task = &t[n];
      ch[n].assignment = &as[n];
      ch[n].action = k ? DOCKER__SWARMKIT__V1__ASSIGNMENT_CHANGE__ASSIGNMENT_ACTION__REMOVE
                       : DOCKER__SWARMKIT__V1__ASSIGNMENT_CHANGE__ASSIGNMENT_ACTION__UPDATE;
      chp[n] = &ch[n];
    }
  }
  m.type = (Docker__Swarmkit__V1__AssignmentsMessage__Type)type;
  m.applies_to = (char *)applies;
  m.results_in = (char *)results;
  m.n_changes = n;
  m.changes = chp;
  size_t len = docker__swarmkit__v1__assignments_message__get_packed_size(&m);
  uint8_t *b = malloc(len + 1);
  docker__swarmkit__v1__assignments_message__pack(&m, b);
  mcp_stream_recv(r->asg, b, len, 0);
  free(b);
}

static int rig_pump(mcp_stream *s, mcp_tstamp ts, int *st, const char **dt) {
  mcp_msg *m = NULL;
  int a = mcp_stream_pump(s, ts, 1, &m, st, dt);
  mcp_msg_free(m);
  return a;
}

START_TEST(test_agent_applies_and_checks_the_chain) {
  agent_rig r;
  int st;
  const char *dt;
  rig_open(&r);
  const char *const c1[] = {"t1", "t2", "t3", NULL};
  rig_send(&r, MCP_DISP_COMPLETE, "", "1", c1, NULL);
  ck_assert_uint_eq(mcp_disp_agent_count(r.a), 3);
  ck_assert_str_eq(mcp_disp_agent_results_in(r.a), "1");
  const char *const u2[] = {"t4", NULL}, *const r2[] = {"t1", NULL};
  rig_send(&r, MCP_DISP_INCREMENTAL, "1", "2", u2, r2);
  ck_assert_uint_eq(mcp_disp_agent_count(r.a), 3);
  ck_assert_int_eq(r.e.n, 2);
  ck_assert_uint_eq(r.e.nchanges[1], 2);
  ck_assert_uint_eq(r.e.total[1], 3);
  const uint8_t *o;
  size_t l;
  ck_assert_int_eq(mcp_disp_agent_get(r.a, MCP_DISP_TASK, "t1", &o, &l), 0);
  ck_assert_int_eq(mcp_disp_agent_get(r.a, MCP_DISP_TASK, "t4", &o, &l), 1);
  /* A COMPLETE replaces the held set. */
  const char *const c3[] = {"t9", NULL};
  rig_send(&r, MCP_DISP_COMPLETE, "", "3", c3, NULL);
  ck_assert_uint_eq(mcp_disp_agent_count(r.a), 1);
  /* Issue 24 item 10: a message that does not chain. swarmkit's agent
   * (session.go:352) hands it to the worker all the same (the code; the
   * issue's summary said "without applying") and calls Assignments again
   * at once on the same session; the last results_in stays. */
  const char *const u4[] = {"t5", NULL};
  rig_send(&r, MCP_DISP_INCREMENTAL, "7", "8", u4, NULL);
  ck_assert_uint_eq(mcp_disp_agent_count(r.a), 2);
  ck_assert_str_eq(mcp_disp_agent_results_in(r.a), "3");
  ck_assert_int_eq(r.e.n, 4);
  ck_assert_int_eq(rig_pump(r.asg, 0, &st, &dt), MCP_STREAM_END);
  ck_assert_int_eq(st, MCP_CODE_CANCELLED);
  ck_assert_ptr_nonnull(strstr(dt, "assignments gap"));
  mcp_stream_del(r.asg);
  r.asg = NULL;
  r.def->ended(r.def->user_data, MCP_DISP_SLOT_ASSIGNMENTS, st, "", 0);
  ck_assert_str_eq(mcp_disp_agent_session_id(r.a), "sid-1");
  ck_assert_int_eq(r.def->open(r.def->user_data, MCP_DISP_SLOT_ASSIGNMENTS, 0,
                               &r.asg),
                   1);
  /* The new call's COMPLETE restarts the chain. */
  mcp_msg *rq;
  ck_assert_int_eq(mcp_stream_pump(r.asg, 0, 1, &rq, &st, &dt),
                   MCP_STREAM_SEND);
  mcp_msg_free(rq);
  rig_send(&r, MCP_DISP_COMPLETE, "", "1", c3, NULL);
  ck_assert_uint_eq(mcp_disp_agent_count(r.a), 1);
  ck_assert_str_eq(mcp_disp_agent_results_in(r.a), "1");
  const char *const u5[] = {"t6", NULL};
  rig_send(&r, MCP_DISP_INCREMENTAL, "1", "2", u5, NULL);
  ck_assert_uint_eq(mcp_disp_agent_count(r.a), 2);
  ck_assert_str_eq(mcp_disp_agent_results_in(r.a), "2");
  mcp_disp_agent_stats as;
  mcp_disp_agent_get_stats(r.a, &as);
  ck_assert_uint_eq(as.chain_mismatches, 1);
  ck_assert_uint_eq(as.session_errors, 0);
  /* The session lost otherwise (its stream ends): a new one after the
   * backoff. */
  ck_assert_int_ne(rig_pump(r.asg, 0, &st, &dt), MCP_STREAM_END);
  mcp_stream_del(r.asg);
  r.asg = NULL;
  r.def->ended(r.def->user_data, MCP_DISP_SLOT_ASSIGNMENTS, 14, "", 0);
  ck_assert_ptr_null(mcp_disp_agent_session_id(r.a));
  /* Its Session call ends too (the transport would cancel it). */
  ck_assert_int_eq(rig_pump(r.sess, 0, &st, &dt), MCP_STREAM_END);
  ck_assert_int_eq(st, MCP_CODE_CANCELLED);
  mcp_disp_agent_get_stats(r.a, &as);
  ck_assert_uint_eq(as.chain_mismatches, 1);
  ck_assert_uint_eq(as.completes, 3);
  mcp_stream_del(r.sess);
  r.sess = NULL;
  r.def->ended(r.def->user_data, MCP_DISP_SLOT_SESSION, st, "", 0);
  /* A new Session only after the backoff. */
  mcp_stream *s;
  ck_assert_int_eq(r.def->open(r.def->user_data, MCP_DISP_SLOT_SESSION, 0, &s),
                   0);
  mcp_tstamp t = r.def->get_expiry(r.def->user_data);
  ck_assert_uint_gt(t, 0);
  /* One failure for the backoff (1 s +- 20%), not one per call ended. */
  ck_assert_uint_le(t, 1200 * MS);
  mcp_disp_agent_get_stats(r.a, &as);
  ck_assert_uint_eq(as.session_errors, 1);
  ck_assert_int_eq(r.def->open(r.def->user_data, MCP_DISP_SLOT_SESSION, t, &s),
                   1);
  mcp_stream_del(s);
  r.def->ended(r.def->user_data, MCP_DISP_SLOT_SESSION, 1, "", t);
  rig_close(&r);
}
END_TEST

START_TEST(test_agent_malformed_changes_nothing) {
  agent_rig r;
  int st;
  const char *dt;
  rig_open(&r);
  const char *const c1[] = {"t1", "t2", NULL};
  rig_send(&r, MCP_DISP_COMPLETE, "", "1", c1, NULL);
  /* A change whose task is garbage: field 1 (assignment) holding a task
   * (field 1) of bytes that do not decode. */
  const uint8_t bad[] = {0x10, 0x01, 0x1a, 0x01, '2', 0x22, 0x06, 0x0a,
                         0x04, 0x0a, 0x02, 0x0a, 0x7f};
  mcp_stream_recv(r.asg, bad, sizeof bad, 0);
  ck_assert_uint_eq(mcp_disp_agent_count(r.a), 2);
  ck_assert_str_eq(mcp_disp_agent_results_in(r.a), "1");
  ck_assert_int_eq(rig_pump(r.asg, 0, &st, &dt), MCP_STREAM_END);
  ck_assert_int_eq(st, mcp_error_grpc_status(MCP_ERR_MALFORMED));
  ck_assert_str_eq(dt, "malformed AssignmentsMessage: an object that does "
                       "not decode");
  mcp_disp_agent_stats as;
  mcp_disp_agent_get_stats(r.a, &as);
  ck_assert_uint_eq(as.malformed, 1);
  rig_close(&r);
  /* Truncated bytes, an unknown type, a task without id. */
  const uint8_t trunc[] = {0x22, 0x09, 0x0a};
  const uint8_t type9[] = {0x08, 0x09};
  const uint8_t noid[] = {0x22, 0x04, 0x0a, 0x02, 0x0a, 0x00};
  const struct {
    const uint8_t *p;
    size_t n;
  } cases[] = {{trunc, sizeof trunc}, {type9, sizeof type9},
               {noid, sizeof noid}};
  for (size_t i = 0; i < 3; ++i) {
    rig_open(&r);
    rig_send(&r, MCP_DISP_COMPLETE, "", "1", c1, NULL);
    mcp_stream_recv(r.asg, cases[i].p, cases[i].n, 0);
    ck_assert_uint_eq(mcp_disp_agent_count(r.a), 2);
    ck_assert_int_eq(rig_pump(r.asg, 0, &st, &dt), MCP_STREAM_END);
    ck_assert_int_eq(st, mcp_error_grpc_status(MCP_ERR_MALFORMED));
    ck_assert_ptr_nonnull(strstr(dt, "malformed AssignmentsMessage: "));
    rig_close(&r);
  }
}
END_TEST

/* One Heartbeat call of the rig's agent at |ts|, answered with |in|:
 * the pump after the answer (its status in *st). */
static int rig_heartbeat(agent_rig *r, mcp_tstamp ts, const uint8_t *in,
                         size_t n, int *st) {
  mcp_stream *h;
  mcp_msg *msg = NULL;
  const char *dt;
  ck_assert_int_eq(
      r->def->open(r->def->user_data, MCP_DISP_SLOT_HEARTBEAT, ts, &h), 1);
  ck_assert_int_eq(mcp_stream_pump(h, ts, 1, &msg, st, &dt), MCP_STREAM_SEND);
  mcp_msg_free(msg);
  mcp_stream_recv(h, in, n, ts);
  int a;
  do {
    a = rig_pump(h, ts, st, &dt);
  } while (a == MCP_STREAM_HALF_CLOSE);
  mcp_stream_del(h);
  r->def->ended(r->def->user_data, MCP_DISP_SLOT_HEARTBEAT,
                a == MCP_STREAM_END ? *st : MCP_CODE_OK, "", ts);
  return a;
}

/* A status report the manager refuses (PermissionDenied, an error of
 * the call) is not sent again at once, which would spin, but after the
 * next heartbeat answered; the same state goes again. */
START_TEST(test_agent_refused_report_is_retried_after_the_next_heartbeat) {
  agent_rig r;
  int st;
  const char *dt;
  mcp_stream *u;
  mcp_msg *msg;
  rig_report = 512; /* RUNNING: five states, ACCEPTED first */
  rig_open(&r);
  rig_report = -1;
  const char *const c1[] = {"t1", NULL};
  rig_send(&r, MCP_DISP_COMPLETE, "", "1", c1, NULL);
  ck_assert_int_eq(
      r.def->open(r.def->user_data, MCP_DISP_SLOT_UPDATE_TASK_STATUS, 0, &u), 1);
  ck_assert_int_eq(mcp_stream_pump(u, 0, 1, &msg, &st, &dt), MCP_STREAM_SEND);
  uint8_t b[256];
  mcp_msg_flatten(msg, b);
  Docker__Swarmkit__V1__UpdateTaskStatusRequest *req =
      docker__swarmkit__v1__update_task_status_request__unpack(
          NULL, mcp_msg_len(msg), b);
  ck_assert_uint_eq(req->n_updates, 1);
  ck_assert_str_eq(req->updates[0]->task_id, "t1");
  ck_assert_int_eq(req->updates[0]->status->state, 256);
  ck_assert_str_eq(req->updates[0]->status->message, "accepted");
  ck_assert_ptr_nonnull(req->updates[0]->status->timestamp);
  docker__swarmkit__v1__update_task_status_request__free_unpacked(req, NULL);
  mcp_msg_free(msg);
  mcp_stream_del(u);
  r.def->ended(r.def->user_data, MCP_DISP_SLOT_UPDATE_TASK_STATUS,
               MCP_CODE_PERMISSION_DENIED, MCP_DISP_ERR_NOT_ASSIGNED, 0);
  /* Not at once; the session stays. */
  ck_assert_int_eq(
      r.def->open(r.def->user_data, MCP_DISP_SLOT_UPDATE_TASK_STATUS, 0, &u), 0);
  ck_assert_str_eq(mcp_disp_agent_session_id(r.a), "sid-1");
  /* A heartbeat answered: the same report again. */
  Docker__Swarmkit__V1__HeartbeatResponse hr =
      DOCKER__SWARMKIT__V1__HEARTBEAT_RESPONSE__INIT;
  size_t n = docker__swarmkit__v1__heartbeat_response__pack(&hr, b);
  rig_heartbeat(&r, 1 * SEC, b, n, &st);
  ck_assert_int_eq(r.def->open(r.def->user_data,
                               MCP_DISP_SLOT_UPDATE_TASK_STATUS, 1 * SEC, &u),
                   1);
  ck_assert_int_eq(mcp_stream_pump(u, 1 * SEC, 1, &msg, &st, &dt),
                   MCP_STREAM_SEND);
  mcp_msg_flatten(msg, b);
  req = docker__swarmkit__v1__update_task_status_request__unpack(
      NULL, mcp_msg_len(msg), b);
  ck_assert_uint_eq(req->n_updates, 1);
  ck_assert_int_eq(req->updates[0]->status->state, 256);
  docker__swarmkit__v1__update_task_status_request__free_unpacked(req, NULL);
  mcp_msg_free(msg);
  mcp_stream_del(u);
  r.def->ended(r.def->user_data, MCP_DISP_SLOT_UPDATE_TASK_STATUS,
               MCP_CODE_OK, "", 1 * SEC);
  /* Acknowledged: the next state follows at once. */
  ck_assert_int_eq(r.def->open(r.def->user_data,
                               MCP_DISP_SLOT_UPDATE_TASK_STATUS, 1 * SEC, &u),
                   1);
  ck_assert_int_eq(mcp_stream_pump(u, 1 * SEC, 1, &msg, &st, &dt),
                   MCP_STREAM_SEND);
  mcp_msg_flatten(msg, b);
  req = docker__swarmkit__v1__update_task_status_request__unpack(
      NULL, mcp_msg_len(msg), b);
  ck_assert_int_eq(req->updates[0]->status->state, 320);
  ck_assert_str_eq(req->updates[0]->status->message, "preparing");
  docker__swarmkit__v1__update_task_status_request__free_unpacked(req, NULL);
  mcp_msg_free(msg);
  mcp_stream_del(u);
  r.def->ended(r.def->user_data, MCP_DISP_SLOT_UPDATE_TASK_STATUS,
               MCP_CODE_OK, "", 1 * SEC);
  rig_close(&r);
}
END_TEST

/* What the manager answers that cannot be used: a period out of range is
 * ignored; a HeartbeatResponse or SessionMessage that does not decode, or
 * a SessionMessage without id, loses the session (the held set stays). */
START_TEST(test_agent_bad_session_and_heartbeat_replies) {
  agent_rig r;
  int st;
  const char *dt;
  rig_open(&r);
  const char *const c1[] = {"t1", NULL};
  rig_send(&r, MCP_DISP_COMPLETE, "", "1", c1, NULL);
  Docker__Swarmkit__V1__HeartbeatResponse hr =
      DOCKER__SWARMKIT__V1__HEARTBEAT_RESPONSE__INIT;
  Google__Protobuf__Duration per = GOOGLE__PROTOBUF__DURATION__INIT;
  hr.period = &per;
  const int64_t secs[] = {-1, 0, 86400LL * 365 * 2, 7};
  const int32_t nanos[] = {0, -5, 0, 0};
  uint8_t b[64];
  for (int k = 0; k < 4; ++k) {
    per.seconds = secs[k];
    per.nanos = nanos[k];
    size_t n = docker__swarmkit__v1__heartbeat_response__pack(&hr, b);
    rig_heartbeat(&r, (mcp_tstamp)k * 100 * SEC, b, n, &st);
    ck_assert_uint_eq(mcp_disp_agent_period(r.a), k < 3 ? 5 * SEC : 7 * SEC);
  }
  ck_assert_str_eq(mcp_disp_agent_session_id(r.a), "sid-1");
  /* A HeartbeatResponse that does not decode. */
  static const uint8_t junk[] = {0x0a, 0x05, 0x08};
  ck_assert_int_eq(rig_heartbeat(&r, 400 * SEC, junk, sizeof junk, &st),
                   MCP_STREAM_END);
  ck_assert_int_eq(st, mcp_error_grpc_status(MCP_ERR_MALFORMED));
  ck_assert_ptr_null(mcp_disp_agent_session_id(r.a));
  ck_assert_int_eq(rig_pump(r.asg, 400 * SEC, &st, &dt), MCP_STREAM_END);
  ck_assert_int_eq(st, MCP_CODE_CANCELLED);
  ck_assert_uint_eq(mcp_disp_agent_count(r.a), 1);
  rig_close(&r);
  /* SessionMessages: bytes that do not decode, no id, an id not UTF-8. */
  static const uint8_t nosid[] = {0x1a, 0x00};
  static const uint8_t badsid[] = {0x0a, 0x01, 0xff};
  const struct {
    const uint8_t *p;
    size_t n;
  } cases[] = {{junk, sizeof junk}, {nosid, sizeof nosid},
               {badsid, sizeof badsid}};
  for (size_t i = 0; i < 3; ++i) {
    rig_open(&r);
    rig_send(&r, MCP_DISP_COMPLETE, "", "1", c1, NULL);
    mcp_stream_recv(r.sess, cases[i].p, cases[i].n, 0);
    ck_assert_int_eq(rig_pump(r.sess, 0, &st, &dt), MCP_STREAM_END);
    ck_assert_int_eq(st, mcp_error_grpc_status(MCP_ERR_MALFORMED));
    mcp_stream_del(r.sess);
    r.sess = NULL;
    r.def->ended(r.def->user_data, MCP_DISP_SLOT_SESSION, st, dt, 0);
    ck_assert_ptr_null(mcp_disp_agent_session_id(r.a));
    ck_assert_int_eq(rig_pump(r.asg, 0, &st, &dt), MCP_STREAM_END);
    ck_assert_uint_eq(mcp_disp_agent_count(r.a), 1);
    mcp_disp_agent_stats as;
    mcp_disp_agent_get_stats(r.a, &as);
    ck_assert_uint_eq(as.session_errors, 1);
    rig_close(&r);
  }
}
END_TEST

/* AssignmentsMessages that decode but are not what the agent holds: an
 * unknown action, a change without assignment, applies_to not UTF-8, an
 * id past 1024 bytes, all refused; a VolumeAssignment is skipped. */
START_TEST(test_agent_refuses_bad_changes_and_skips_volumes) {
  agent_rig r;
  int st;
  const char *dt;
  const char *const c1[] = {"t1", "t2", NULL};
  /* changes {assignment {task {id "x"}}, action 7} */
  static const uint8_t action7[] = {0x22, 0x09, 0x0a, 0x05, 0x0a, 0x03,
                                    0x0a, 0x01, 'x',  0x10, 0x07};
  /* changes {action REMOVE} */
  static const uint8_t noasg[] = {0x22, 0x02, 0x10, 0x01};
  /* type INCREMENTAL, applies_to "\xff" */
  static const uint8_t badap[] = {0x08, 0x01, 0x12, 0x01, 0xff};
  uint8_t longid[1100];
  size_t il = 1025;
  /* changes {assignment {task {id <1025 x>}}}: 3 bytes of lengths each */
  size_t tl = 1 + 2 + il, al = 1 + 2 + tl, cl = 1 + 2 + al;
  size_t p = 0;
  longid[p++] = 0x22;
  longid[p++] = (uint8_t)(0x80 | (cl & 0x7f));
  longid[p++] = (uint8_t)(cl >> 7);
  longid[p++] = 0x0a;
  longid[p++] = (uint8_t)(0x80 | (al & 0x7f));
  longid[p++] = (uint8_t)(al >> 7);
  longid[p++] = 0x0a;
  longid[p++] = (uint8_t)(0x80 | (tl & 0x7f));
  longid[p++] = (uint8_t)(tl >> 7);
  longid[p++] = 0x0a;
  longid[p++] = (uint8_t)(0x80 | (il & 0x7f));
  longid[p++] = (uint8_t)(il >> 7);
  memset(longid + p, 'x', il);
  p += il;
  const struct {
    const uint8_t *p;
    size_t n;
    const char *why;
  } cases[] = {{action7, sizeof action7, "an unknown action"},
               {noasg, sizeof noasg, "a change without assignment"},
               {badap, sizeof badap, "applies_to or results_in not UTF-8"},
               {longid, p, "an object without a valid id"}};
  for (size_t i = 0; i < 4; ++i) {
    rig_open(&r);
    rig_send(&r, MCP_DISP_COMPLETE, "", "1", c1, NULL);
    mcp_stream_recv(r.asg, cases[i].p, cases[i].n, 0);
    ck_assert_uint_eq(mcp_disp_agent_count(r.a), 2);
    ck_assert_str_eq(mcp_disp_agent_results_in(r.a), "1");
    ck_assert_int_eq(rig_pump(r.asg, 0, &st, &dt), MCP_STREAM_END);
    ck_assert_int_eq(st, mcp_error_grpc_status(MCP_ERR_MALFORMED));
    ck_assert_ptr_nonnull(strstr(dt, cases[i].why));
    rig_close(&r);
  }
  /* INCREMENTAL 1 -> 2: changes {assignment {volume (4) {id "v"}}}. */
  rig_open(&r);
  rig_send(&r, MCP_DISP_COMPLETE, "", "1", c1, NULL);
  static const uint8_t vol[] = {0x08, 0x01, 0x12, 0x01, '1', 0x1a, 0x01, '2',
                                0x22, 0x07, 0x0a, 0x05, 0x22, 0x03, 0x0a,
                                0x01, 'v'};
  mcp_stream_recv(r.asg, vol, sizeof vol, 0);
  ck_assert_int_ne(rig_pump(r.asg, 0, &st, &dt), MCP_STREAM_END);
  ck_assert_str_eq(mcp_disp_agent_results_in(r.a), "2");
  ck_assert_uint_eq(mcp_disp_agent_count(r.a), 2);
  ck_assert_int_eq(r.e.n, 2);
  rig_close(&r);
}
END_TEST

START_TEST(test_agent_follows_a_new_session_id) {
  /* The manager may hand out another id on the Session stream: the
   * Assignments call of the old id ends and a new one starts, without
   * losing the session. */
  agent_rig r;
  int st;
  const char *dt;
  rig_open(&r);
  Docker__Swarmkit__V1__SessionMessage m =
      DOCKER__SWARMKIT__V1__SESSION_MESSAGE__INIT;
  m.session_id = "sid-2";
  uint8_t b[64];
  size_t n = docker__swarmkit__v1__session_message__pack(&m, b);
  mcp_stream_recv(r.sess, b, n, 0);
  ck_assert_str_eq(mcp_disp_agent_session_id(r.a), "sid-2");
  ck_assert_int_eq(rig_pump(r.asg, 0, &st, &dt), MCP_STREAM_END);
  ck_assert_int_eq(st, MCP_CODE_CANCELLED);
  mcp_stream_del(r.asg);
  r.asg = NULL;
  r.def->ended(r.def->user_data, MCP_DISP_SLOT_ASSIGNMENTS, st, dt, 0);
  ck_assert_str_eq(mcp_disp_agent_session_id(r.a), "sid-2");
  ck_assert_int_ne(rig_pump(r.sess, 0, &st, &dt), MCP_STREAM_END);
  mcp_stream *s;
  ck_assert_int_eq(r.def->open(r.def->user_data, MCP_DISP_SLOT_ASSIGNMENTS,
                               0, &s),
                   1);
  mcp_msg *msg;
  ck_assert_int_eq(mcp_stream_pump(s, 0, 1, &msg, &st, &dt), MCP_STREAM_SEND);
  uint8_t rb[64];
  mcp_msg_flatten(msg, rb);
  Docker__Swarmkit__V1__AssignmentsRequest *req =
      docker__swarmkit__v1__assignments_request__unpack(NULL, mcp_msg_len(msg),
                                                        rb);
  ck_assert_str_eq(req->session_id, "sid-2");
  docker__swarmkit__v1__assignments_request__free_unpacked(req, NULL);
  mcp_msg_free(msg);
  r.asg = s;
  rig_close(&r);
}
END_TEST

/* ---- allocation failures ---- */

START_TEST(test_manager_survives_every_failed_allocation) {
  long runs = 0;
  for (long i = 1;; ++i) {
    th_mem tm;
    th_mem_init(&tm, i);
    mcp_store *view = th_store(NULL);
    put_task(view, "node-a", "t1", "v1", 0);
    put_secret(view, "node-a", "s1", 0);
    mcp_disp_options o;
    mcp_disp *d = NULL;
    mcp_disp_options_default(&o);
    o.view = view;
    o.rand = mcp_rand_splitmix64;
    o.rand_user_data = &seed;
    o.mem = &tm.mem;
    o.debounce = o.max_delay = 0;
    if (mcp_disp_new(&d, &o, 0) != 0) {
      mcp_store_del(view);
      ck_assert_int_eq(tm.live, 0);
      continue;
    }
    const mcp_service_def *defs;
    mcp_disp_services(d, &defs);
    mcp_peer_info peer = {"p", 0, NULL, NULL, 0};
    mcp_stream *s = NULL, *a = NULL;
    Docker__Swarmkit__V1__SessionRequest r =
        DOCKER__SWARMKIT__V1__SESSION_REQUEST__INIT;
    Docker__Swarmkit__V1__NodeDescription desc =
        DOCKER__SWARMKIT__V1__NODE_DESCRIPTION__INIT;
    desc.hostname = "node-a";
    r.description = &desc;
    char sid[64] = "";
    if (defs[SESSION].open(defs[SESSION].user_data, &peer, 0, &s) == 0) {
      uint8_t b[64];
      size_t n = docker__swarmkit__v1__session_request__pack(&r, b);
      mcp_stream_recv(s, b, n, 0);
      mcp_msg *m;
      int st;
      const char *dt;
      if (mcp_stream_pump(s, 0, 1, &m, &st, &dt) == MCP_STREAM_SEND) {
        uint8_t ob[256];
        mcp_msg_flatten(m, ob);
        Docker__Swarmkit__V1__SessionMessage *sm =
            docker__swarmkit__v1__session_message__unpack(NULL,
                                                          mcp_msg_len(m), ob);
        snprintf(sid, sizeof sid, "%s", sm->session_id);
        docker__swarmkit__v1__session_message__free_unpacked(sm, NULL);
        mcp_msg_free(m);
      }
    }
    if (*sid && defs[ASSIGN].open(defs[ASSIGN].user_data, &peer, 0, &a) == 0) {
      Docker__Swarmkit__V1__AssignmentsRequest ar =
          DOCKER__SWARMKIT__V1__ASSIGNMENTS_REQUEST__INIT;
      ar.session_id = sid;
      uint8_t b[64];
      size_t n = docker__swarmkit__v1__assignments_request__pack(&ar, b);
      mcp_stream_recv(a, b, n, 0);
      for (int k = 0; k < 3; ++k) {
        mcp_msg *m;
        int st;
        const char *dt;
        if (k == 1) {
          del(view, "node-a", "task/t1", 1);
        }
        int act = mcp_stream_pump(a, (mcp_tstamp)k, 1, &m, &st, &dt);
        if (act == MCP_STREAM_SEND) {
          mcp_msg_free(m);
        }
        if (act == MCP_STREAM_END) {
          break;
        }
      }
    }
    /* Heartbeat, UpdateTaskStatus, Tasks and a replacing Session: run
     * to their end or idle, whatever they say. */
    for (int k = HEARTBEAT; *sid && k <= TASKS + 1; ++k) {
      int m = k == TASKS + 1 ? SESSION : k;
      mcp_stream *x = NULL;
      uint8_t b[128];
      size_t n;
      if (defs[m].open(defs[m].user_data, &peer, 3, &x) != 0) {
        continue;
      }
      if (m == UTS) {
        Docker__Swarmkit__V1__UpdateTaskStatusRequest ur =
            DOCKER__SWARMKIT__V1__UPDATE_TASK_STATUS_REQUEST__INIT;
        Docker__Swarmkit__V1__UpdateTaskStatusRequest__TaskStatusUpdate u =
            DOCKER__SWARMKIT__V1__UPDATE_TASK_STATUS_REQUEST__TASK_STATUS_UPDATE__INIT;
        Docker__Swarmkit__V1__UpdateTaskStatusRequest__TaskStatusUpdate
            *up[1] = {&u};
        Docker__Swarmkit__V1__TaskStatus ts =
            DOCKER__SWARMKIT__V1__TASK_STATUS__INIT;
        ts.message = "running";
        u.task_id = "t1";
        u.status = &ts;
        ur.session_id = sid;
        ur.n_updates = 1;
        ur.updates = up;
        n = docker__swarmkit__v1__update_task_status_request__pack(&ur, b);
      } else if (m == SESSION) {
        n = docker__swarmkit__v1__session_request__pack(&r, b);
      } else {
        Docker__Swarmkit__V1__AssignmentsRequest hr =
            DOCKER__SWARMKIT__V1__ASSIGNMENTS_REQUEST__INIT;
        hr.session_id = sid;
        n = docker__swarmkit__v1__assignments_request__pack(&hr, b);
      }
      mcp_stream_recv(x, b, n, 3);
      mcp_stream_half_close(x, 3);
      for (int j = 0; j < 4; ++j) {
        mcp_msg *m2;
        int st;
        const char *dt;
        int act = mcp_stream_pump(x, 3, 1, &m2, &st, &dt);
        if (act == MCP_STREAM_SEND) {
          mcp_msg_free(m2);
        } else {
          break;
        }
      }
      mcp_stream_del(x);
    }
    mcp_stream_del(a);
    mcp_stream_del(s);
    mcp_disp_del(d);
    mcp_store_del(view);
    ck_assert_int_eq(tm.live, 0);
    ++runs;
    if (!tm.failed) {
      break; /* every allocation of the scenario has failed once */
    }
  }
  ck_assert_int_gt(runs, 20);
}
END_TEST

START_TEST(test_agent_apply_is_all_or_nothing_under_failed_allocations) {
  /* Each run fails one allocation from the first message on: a message
   * either applies whole or leaves the held set and the chain as they
   * were (and the stream ends NOMEM). */
  for (long k = 1;; ++k) {
    th_mem tm;
    th_mem_init(&tm, 0);
    rig_mem = &tm.mem;
    agent_rig r;
    rig_open(&r);
    const char *const c1[] = {"t1", "t2", "t3", NULL};
    const char *const u2[] = {"t4", "t5", NULL}, *const r2[] = {"t1", NULL};
    tm.fail_at = tm.count + k;
    rig_send(&r, MCP_DISP_COMPLETE, "", "1", c1, NULL);
    size_t n1 = mcp_disp_agent_count(r.a);
    ck_assert(n1 == 0 || n1 == 3);
    ck_assert_str_eq(mcp_disp_agent_results_in(r.a), n1 ? "1" : "");
    if (n1) {
      rig_send(&r, MCP_DISP_INCREMENTAL, "1", "2", u2, r2);
      size_t n2 = mcp_disp_agent_count(r.a);
      const char *ri = mcp_disp_agent_results_in(r.a);
      ck_assert((n2 == 3 && strcmp(ri, "1") == 0) ||
                (n2 == 4 && strcmp(ri, "2") == 0));
    }
    rig_close(&r);
    rig_mem = NULL;
    ck_assert_int_eq(tm.live, 0);
    if (!tm.failed) {
      ck_assert_int_gt(k, 10);
      break; /* past the last allocation of the two messages */
    }
  }
}
END_TEST

START_TEST(test_view_names) {
  char b[16];
  ck_assert_uint_eq(mcp_disp_node_collection(b, sizeof b, "node-a"), 11);
  ck_assert_str_eq(b, "node/node-a");
  ck_assert_uint_eq(mcp_disp_item_name(b, sizeof b, MCP_DISP_SECRET, "db"), 9);
  ck_assert_str_eq(b, "secret/db");
  ck_assert_uint_eq(mcp_disp_item_name(b, 6, MCP_DISP_TASK, "abcdef"), 11);
  ck_assert_str_eq(b, "task/");
  ck_assert_uint_eq(mcp_disp_item_name(b, sizeof b, 9, "x"), 0);
  ck_assert_str_eq(b, "");
  ck_assert_str_eq(mcp_disp_kind_name(MCP_DISP_CONFIG), "config");
  ck_assert_ptr_null(mcp_disp_kind_name(4));
}
END_TEST

/* ---- swarmkit's task rules (mcp_disp_task_*) ---- */

static uint8_t *task_with_refs(const char *node, int state, const char *image,
                               const char *meta_name, size_t *len) {
  Docker__Swarmkit__V1__Task t = DOCKER__SWARMKIT__V1__TASK__INIT;
  Docker__Swarmkit__V1__TaskStatus st = DOCKER__SWARMKIT__V1__TASK_STATUS__INIT;
  Docker__Swarmkit__V1__TaskSpec spec = DOCKER__SWARMKIT__V1__TASK_SPEC__INIT;
  Docker__Swarmkit__V1__ContainerSpec c =
      DOCKER__SWARMKIT__V1__CONTAINER_SPEC__INIT;
  Docker__Swarmkit__V1__SecretReference s1 =
      DOCKER__SWARMKIT__V1__SECRET_REFERENCE__INIT;
  Docker__Swarmkit__V1__SecretReference s2 =
      DOCKER__SWARMKIT__V1__SECRET_REFERENCE__INIT;
  Docker__Swarmkit__V1__ConfigReference c1 =
      DOCKER__SWARMKIT__V1__CONFIG_REFERENCE__INIT;
  Docker__Swarmkit__V1__Meta meta = DOCKER__SWARMKIT__V1__META__INIT;
  Docker__Swarmkit__V1__SecretReference *ss[] = {&s1, &s2};
  Docker__Swarmkit__V1__ConfigReference *cs[] = {&c1};
  s1.secret_id = (char *)"db-pass";
  s2.secret_id = (char *)""; /* an empty id references nothing */
  c1.config_id = (char *)"web-conf";
  c.image = (char *)image;
  c.n_secrets = 2;
  c.secrets = ss;
  c.n_configs = 1;
  c.configs = cs;
  spec.runtime_case = DOCKER__SWARMKIT__V1__TASK_SPEC__RUNTIME_CONTAINER;
  spec.container = &c;
  t.id = (char *)"t1";
  t.node_id = (char *)node;
  st.state = (Docker__Swarmkit__V1__TaskState)state;
  t.status = &st;
  t.spec = &spec;
  Docker__Swarmkit__V1__Version v = DOCKER__SWARMKIT__V1__VERSION__INIT;
  if (meta_name) {
    v.index = (uint64_t)strlen(meta_name);
    meta.version = &v;
    t.meta = &meta;
  }
  *len = docker__swarmkit__v1__task__get_packed_size(&t);
  uint8_t *p = malloc(*len);
  docker__swarmkit__v1__task__pack(&t, p);
  return p;
}

typedef struct refs_seen {
  char s[4][32];
  int n;
} refs_seen;

static int see_ref(int kind, const char *id, size_t len, void *ud) {
  refs_seen *r = ud;
  ck_assert_int_lt(r->n, 4);
  snprintf(r->s[r->n++], sizeof(r->s[0]), "%s/%.*s", mcp_disp_kind_name(kind),
           (int)len, id);
  return 0;
}

static int stop_ref(int kind, const char *id, size_t len, void *ud) {
  (void)kind;
  (void)id;
  (void)len;
  (void)ud;
  return MCP_ERR_NOMEM;
}

START_TEST(test_task_state_names_are_swarmkits) {
  ck_assert_str_eq(mcp_disp_task_state_name(0), "NEW");
  ck_assert_str_eq(mcp_disp_task_state_name(192), "ASSIGNED");
  ck_assert_str_eq(mcp_disp_task_state_name(800), "REMOVE");
  ck_assert_str_eq(mcp_disp_task_state_name(832), "ORPHANED");
  ck_assert_ptr_null(mcp_disp_task_state_name(896));
  ck_assert_ptr_null(mcp_disp_task_state_name(-1));
  ck_assert_int_eq(mcp_disp_task_state_parse("REMOVE"),
                   DOCKER__SWARMKIT__V1__TASK_STATE__REMOVE);
  ck_assert_int_eq(mcp_disp_task_state_parse("ORPHANED"),
                   DOCKER__SWARMKIT__V1__TASK_STATE__ORPHANED);
  ck_assert_int_eq(mcp_disp_task_state_parse("running"), -1);
  ck_assert_int_eq(mcp_disp_task_state_parse(NULL), -1);
  ck_assert_int_eq(mcp_disp_task_assigned(64), 0);
  ck_assert_int_eq(mcp_disp_task_assigned(MCP_DISP_TASK_ASSIGNED), 1);
  ck_assert_int_eq(mcp_disp_task_assigned(704), 1);
}
END_TEST

START_TEST(test_task_read_gives_node_state_and_references) {
  size_t n;
  uint8_t *b = task_with_refs("node-a", 512, "nginx", NULL, &n);
  mcp_disp_task_info info;
  refs_seen r = {0};
  ck_assert_int_eq(mcp_disp_task_read(b, n, &info, see_ref, &r), 0);
  ck_assert_uint_eq(info.node_id_len, 6);
  ck_assert_int_eq(memcmp(info.node_id, "node-a", 6), 0);
  ck_assert_int_eq(info.state, 512);
  ck_assert_int_eq(r.n, 2);
  ck_assert_str_eq(r.s[0], "secret/db-pass");
  ck_assert_str_eq(r.s[1], "config/web-conf");
  /* The callback's error stops the read. */
  ck_assert_int_eq(mcp_disp_task_read(b, n, &info, stop_ref, NULL),
                   MCP_ERR_NOMEM);
  free(b);
  /* A state swarmkit does not have; bytes that do not decode. */
  b = task_with_refs("node-a", 999, "nginx", NULL, &n);
  ck_assert_int_eq(mcp_disp_task_read(b, n, &info, NULL, NULL),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(info.state, 999);
  ck_assert_int_eq(mcp_disp_task_read(b, n - 1, &info, NULL, NULL),
                   MCP_ERR_MALFORMED);
  free(b);
  const uint8_t wrong_type[] = {0x32, 0x01, 'x', 0x4a, 0x02, 0x12, 0x01};
  ck_assert_int_eq(mcp_disp_task_read(wrong_type, sizeof wrong_type, &info,
                                      NULL, NULL),
                   MCP_ERR_MALFORMED);
  /* No node, no status: NEW on no node. */
  ck_assert_int_eq(mcp_disp_task_read(NULL, 0, &info, NULL, NULL), 0);
  ck_assert_uint_eq(info.node_id_len, 0);
  ck_assert_int_eq(info.state, 0);
}
END_TEST

START_TEST(test_task_past_running_with_only_status_changed_keeps_held) {
  size_t hn, nn;
  uint8_t *held = task_with_refs("node-a", 512, "nginx", NULL, &hn);
  /* Past RUNNING, status (and meta) changed only: kept. */
  uint8_t *now = task_with_refs("node-a", 576, "nginx", "meta", &nn);
  ck_assert_int_eq(mcp_disp_task_keeps_held(held, hn, now, nn, 576), 1);
  free(now);
  /* Issue 24 item 6: past ASSIGNED, at or below RUNNING, too
   * (assignments.go:268, TasksEqualStable && State > ASSIGNED)... */
  now = task_with_refs("node-a", 512, "nginx", "meta", &nn);
  ck_assert_int_eq(mcp_disp_task_keeps_held(held, hn, now, nn, 512), 1);
  ck_assert_int_eq(mcp_disp_task_keeps_held(held, hn, now, nn, 256), 1);
  /* ...but at ASSIGNED or below (the scheduler's states): sent. */
  ck_assert_int_eq(mcp_disp_task_keeps_held(held, hn, now, nn, 192), 0);
  ck_assert_int_eq(mcp_disp_task_keeps_held(held, hn, now, nn, 64), 0);
  free(now);
  /* The spec changed: sent. */
  now = task_with_refs("node-a", 576, "nginx:2", NULL, &nn);
  ck_assert_int_eq(mcp_disp_task_keeps_held(held, hn, now, nn, 576), 0);
  free(now);
  /* Malformed bytes are never "the same". */
  ck_assert_int_eq(mcp_disp_task_keeps_held(held, hn - 1, held, hn, 576), 0);
  free(held);
}
END_TEST

static Suite *disp_suite(void) {
  Suite *s = suite_create("dispatcher");
  TCase *tc = tcase_create("manager");
  tcase_add_test(tc, test_task_state_names_are_swarmkits);
  tcase_add_test(tc, test_task_read_gives_node_state_and_references);
  tcase_add_test(tc, test_task_past_running_with_only_status_changed_keeps_held);
  tcase_add_test(tc, test_session_first_message_and_stays_open);
  tcase_add_test(tc, test_session_node_addr_is_the_peer_host);
  tcase_add_test(tc, test_session_node_is_the_certificate_cn_under_tls);
  tcase_add_test(tc, test_session_without_node_id_is_refused);
  tcase_add_test(tc, test_session_second_session_replaces_the_older);
  tcase_add_test(tc, test_heartbeat_answers_the_period);
  tcase_add_test(tc, test_heartbeat_period_is_jittered);
  tcase_add_test(tc, test_manager_ids_are_checked);
  tcase_add_test(tc, test_session_expires_after_three_periods_without_heartbeat);
  tcase_add_test(tc, test_session_without_streams_expires_through_the_registry);
  tcase_add_test(tc, test_unknown_session_is_invalid_argument);
  tcase_add_test(tc, test_malformed_request_of_every_method);
  tcase_add_test(tc, test_session_request_fields_are_checked);
  tcase_add_test(tc, test_assignments_queue_dropped_with_the_call);
  tcase_add_test(tc, test_update_task_status_bad_updates);
  tcase_add_test(tc, test_update_task_status_for_another_nodes_task_is_denied);
  tcase_add_test(tc, test_update_task_status_keeps_the_latest_per_task);
  tcase_add_test(tc, test_update_task_status_is_bounded);
  tcase_add_test(tc, test_assignments_complete_then_incremental_chain);
  tcase_add_test(tc, test_assignments_first_message_at_once_even_when_empty);
  tcase_add_test(tc, test_assignments_split_at_100_changes);
  tcase_add_test(tc, test_assignments_secret_shared_by_two_tasks);
  tcase_add_test(tc, test_assignments_collection_removed_and_back);
  tcase_add_test(tc, test_tasks_streams_the_full_list_on_every_change);
  tcase_add_test(tc, test_assignments_only_the_node_changed_hears);
  tcase_add_test(tc, test_view_names);
  suite_add_tcase(s, tc);
  tc = tcase_create("agent");
  tcase_add_test(tc, test_agent_against_the_manager);
  tcase_add_test(tc, test_agent_node_restart_gets_a_new_session);
  tcase_add_test(tc, test_agent_reports_every_task_in_calls_of_1000);
  tcase_add_test(tc, test_agent_reports_each_controller_state);
  tcase_add_test(tc, test_agent_refused_report_is_retried_after_the_next_heartbeat);
  tcase_add_test(tc, test_agent_new_session_after_backoff_on_error);
  tcase_add_test(tc, test_agent_applies_and_checks_the_chain);
  tcase_add_test(tc, test_agent_malformed_changes_nothing);
  tcase_add_test(tc, test_agent_follows_a_new_session_id);
  tcase_add_test(tc, test_agent_bad_session_and_heartbeat_replies);
  tcase_add_test(tc, test_agent_refuses_bad_changes_and_skips_volumes);
  suite_add_tcase(s, tc);
  tc = tcase_create("alloc");
  tcase_add_test(tc, test_manager_survives_every_failed_allocation);
  tcase_add_test(tc, test_agent_apply_is_all_or_nothing_under_failed_allocations);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(disp_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
