/*
 * fuzz_dispatcher: swarmkit's Dispatcher on the engine (mcp/dispatcher.h),
 * both sides in one script (STYLE.md item 15).
 *
 * Header: [opts: bits 0-1 max_changes (1, 2, 3, 100), 2 debounce 10 ms,
 *          3 TLS peers (the node is the CN), 4-5 heartbeat period
 *          (1, 2, 5, 7 s), 6 agent report_state RUNNING]
 * Actions (byte % D_NOPS), operands after:
 *   D_OPEN      u8: method (% 5), node (bits 3-4): a manager call
 *   D_REQ       u8 call, u8 how: a well-formed request for the call's
 *               method (node bits 0-1, session id: bit 2-3 picks a known
 *               one, a stale one or garbage)
 *   D_RAW       u8 call, u8 len, bytes: raw request bytes
 *   D_HALF      u8 call: the peer half-closes
 *   D_PUMP      u8 call: pump until IDLE/END (at most 64)
 *   D_CLOSE     u8 call: the transport drops the call
 *   D_VIEW      u8 op, u8 node, u8 item, u8 version: the view changes
 *   D_ADVANCE   u16: milliseconds; then the registry's expiry
 *   D_A_OPEN    u8 slot: the agent is asked to open one
 *   D_A_RAW     u8 slot, u8 len, bytes: raw bytes into an agent call
 *   D_A_FWD     u8 call: the oldest message a manager Assignments call
 *               sent goes to the agent's Assignments call
 *   D_A_SESS    u8: a SessionMessage with id "s<u8 % 3>" to the agent
 *   D_A_PUMP    u8 slot: pump the agent call (END: deleted, ended())
 *   D_A_END     u8 slot, u8 status: the transport ends the agent call
 *   D_FAIL      u8: fail the (1 + u8 % 32)-th allocation from now
 * Oracles: every manager message decodes with protobuf-c (the method's
 * response type); an Assignments call's messages chain (applies_to =
 * previous results_in, COMPLETE first), carry at most max_changes, and,
 * applied to a model, give exactly the view's node collection once the
 * call is drained without debounce; the agent changes nothing held on a
 * refused message, and a COMPLETE it accepts holds what protobuf-c reads
 * in it; a call ends RESOURCE_EXHAUSTED only after an allocation failed;
 * at the end, nothing is left allocated.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "mcp/dispatcher.h"

#include "github.com/docker/swarmkit/api/dispatcher.pb-c.h"

enum {
  D_OPEN, D_REQ, D_RAW, D_HALF, D_PUMP, D_CLOSE, D_VIEW, D_ADVANCE,
  D_A_OPEN, D_A_RAW, D_A_FWD, D_A_SESS, D_A_PUMP, D_A_END, D_FAIL, D_NOPS
};

#define NCALLS 8
#define NOUT 8
#define NNODES 3
/* View items: 4 tasks, 2 secrets, 2 configs: one bit each in a model. */
#define NITEMS 8

static const char *const nodes[NNODES + 1] = {"node-a", "node-b", "node-c",
                                              "stranger"};
static const char *const item_names[NITEMS] = {
    "task/t0", "task/t1", "task/t2", "task/t3",
    "secret/s0", "secret/s1", "config/c0", "config/c1"};

typedef struct mcall {
  mcp_stream *st;
  int method;
  int sent_any;
  char results_in[32];
  unsigned model; /* Assignments: the items a node would hold */
  int model_broken; /* a message could not be applied to the model */
  uint8_t *out[NOUT]; /* Assignments messages not yet forwarded */
  size_t outn[NOUT];
  int nout;
} mcall;

typedef struct ctx {
  fz_mem fm;
  mcp_store *view;
  mcp_disp *d;
  mcp_disp_agent *ag;
  const mcp_client_def *def;
  mcp_stream *as[MCP_DISP_NSLOTS];
  mcall c[NCALLS];
  mcp_tstamp ts;
  size_t max_changes;
  int debounce, tls;
  char sids[4][64]; /* session ids seen */
  int nsids;
} ctx;

static const ProtobufCMessageDescriptor *const resp_desc[5] = {
    &docker__swarmkit__v1__session_message__descriptor,
    &docker__swarmkit__v1__heartbeat_response__descriptor,
    &docker__swarmkit__v1__update_task_status_response__descriptor,
    &docker__swarmkit__v1__tasks_message__descriptor,
    &docker__swarmkit__v1__assignments_message__descriptor};

static int item_index(int kind, const char *id) {
  char name[80];
  snprintf(name, sizeof name, "%s/%s", mcp_disp_kind_name(kind), id);
  for (int i = 0; i < NITEMS; ++i) {
    if (strcmp(item_names[i], name) == 0) {
      return i;
    }
  }
  return -1;
}

static unsigned view_model(ctx *x, const char *node) {
  char coll[64];
  unsigned m = 0;
  snprintf(coll, sizeof coll, "node/%s", node);
  mcp_watch *w = NULL;
  if (mcp_watch_new(&w, x->view, coll, NULL, NULL) != 0) {
    return 0;
  }
  for (int i = 0; i < NITEMS; ++i) {
    mcp_item it;
    if (mcp_watch_get(w, item_names[i], &it)) {
      m |= 1u << i;
    }
  }
  mcp_watch_del(w);
  return m;
}

static void call_drop(ctx *x, int i) {
  mcall *c = &x->c[i];
  mcp_stream_del(c->st);
  for (int k = 0; k < c->nout; ++k) {
    free(c->out[k]);
  }
  memset(c, 0, sizeof *c);
}

static void check_assignments(ctx *x, mcall *c, const uint8_t *b, size_t n) {
  Docker__Swarmkit__V1__AssignmentsMessage *m =
      docker__swarmkit__v1__assignments_message__unpack(NULL, n, b);
  FZ_CHECK(m, "an assignments message does not decode");
  FZ_CHECK(strcmp(m->applies_to, c->results_in) == 0,
           "chain: applies_to %s after results_in %s", m->applies_to,
           c->results_in);
  FZ_CHECK((m->type == 0) == !c->sent_any, "COMPLETE first, and only first");
  FZ_CHECK(m->n_changes <= x->max_changes, "%zu changes in one message",
           m->n_changes);
  FZ_CHECK(*m->results_in && strlen(m->results_in) < sizeof c->results_in,
           "results_in");
  snprintf(c->results_in, sizeof c->results_in, "%s", m->results_in);
  for (size_t i = 0; i < m->n_changes; ++i) {
    const Docker__Swarmkit__V1__Assignment *a = m->changes[i]->assignment;
    const char *id = NULL;
    FZ_CHECK(a, "a change without assignment");
    if (a->item_case == DOCKER__SWARMKIT__V1__ASSIGNMENT__ITEM_TASK) {
      id = a->task->id;
    } else if (a->item_case == DOCKER__SWARMKIT__V1__ASSIGNMENT__ITEM_SECRET) {
      id = a->secret->id;
    } else if (a->item_case == DOCKER__SWARMKIT__V1__ASSIGNMENT__ITEM_CONFIG) {
      id = a->config->id;
    }
    FZ_CHECK(id, "a change of no kind");
    int k = item_index((int)a->item_case, id);
    if (k < 0) {
      c->model_broken = 1; /* an id the script never wrote: bodies differ */
      continue;
    }
    if (m->changes[i]->action) {
      FZ_CHECK(c->model & (1u << k), "REMOVE of %s never sent", id);
      c->model &= ~(1u << k);
    } else {
      c->model |= 1u << k;
    }
  }
  c->sent_any = 1;
  docker__swarmkit__v1__assignments_message__free_unpacked(m, NULL);
}

/* Pumps a manager call until it is idle or ends. */
static void pump_call(ctx *x, int i) {
  mcall *c = &x->c[i];
  for (int k = 0; c->st && k < 64; ++k) {
    mcp_msg *m = NULL;
    int st;
    const char *dt;
    int a = mcp_stream_pump(c->st, x->ts, 1, &m, &st, &dt);
    FZ_LOG("pump call %d (method %d): %d", i, c->method, a);
    if (a == MCP_STREAM_SEND) {
      size_t n = mcp_msg_len(m);
      uint8_t *b = malloc(n + 1);
      mcp_msg_flatten(m, b);
      mcp_msg_free(m);
      ProtobufCMessage *pm =
          protobuf_c_message_unpack(resp_desc[c->method], NULL, n, b);
      FZ_CHECK(pm, "method %d sent bytes that do not decode", c->method);
      if (c->method == 0) {
        Docker__Swarmkit__V1__SessionMessage *sm = (void *)pm;
        if (x->nsids < 4) {
          snprintf(x->sids[x->nsids++], 64, "%s", sm->session_id);
        } else {
          snprintf(x->sids[3], 64, "%s", sm->session_id);
        }
      }
      protobuf_c_message_free_unpacked(pm, NULL);
      if (c->method == 4) {
        check_assignments(x, c, b, n);
        if (c->nout < NOUT) {
          c->out[c->nout] = b;
          c->outn[c->nout++] = n;
          b = NULL;
        }
      }
      free(b);
      continue;
    }
    if (a == MCP_STREAM_END) {
      FZ_CHECK(dt != NULL, "an end without details");
      FZ_LOG("call %d ends: %d %s", i, st, dt);
      /* RESOURCE_EXHAUSTED: NOMEM (the status bound is out of reach). */
      FZ_CHECK(st != MCP_CODE_RESOURCE_EXHAUSTED || x->fm.fired > 0,
               "call %d ended %d (%s) with no allocation failed", i, st, dt);
      call_drop(x, i);
      return;
    }
    break;
  }
}

/* After a quiet drain (no debounce, nothing failing), an Assignments
 * call's model is the view of its node. */
static void check_drained(ctx *x, int i, const char *node) {
  mcall *c = &x->c[i];
  if (c->st && c->method == 4 && c->sent_any && !c->model_broken &&
      !x->debounce && node) {
    unsigned want = view_model(x, node);
    FZ_LOG("call %d (%s): model %x, view %x", i, node, c->model, want);
    FZ_CHECK(c->model == want, "node %s: model %x, view %x", node, c->model,
             want);
  }
}

/* Sends a request; |sid| gets the session id it named. */
static void send_req(ctx *x, int i, fz_in *in, char *sid) {
  mcall *c = &x->c[i];
  unsigned how = fz_u8(in);
  const char *node = nodes[how & 3];
  unsigned s = (how >> 2) & 3;
  if (s < 2 && x->nsids) {
    snprintf(sid, 64, "%s", x->sids[(x->nsids - 1 - s % x->nsids)]);
  } else if (s == 2) {
    snprintf(sid, 64, "garbage");
  } else {
    sid[0] = 0;
  }
  uint8_t buf[512];
  size_t n = 0;
  ProtobufCMessage *pm;
  Docker__Swarmkit__V1__SessionRequest sr =
      DOCKER__SWARMKIT__V1__SESSION_REQUEST__INIT;
  Docker__Swarmkit__V1__NodeDescription nd =
      DOCKER__SWARMKIT__V1__NODE_DESCRIPTION__INIT;
  Docker__Swarmkit__V1__AssignmentsRequest ar =
      DOCKER__SWARMKIT__V1__ASSIGNMENTS_REQUEST__INIT;
  Docker__Swarmkit__V1__UpdateTaskStatusRequest ur =
      DOCKER__SWARMKIT__V1__UPDATE_TASK_STATUS_REQUEST__INIT;
  Docker__Swarmkit__V1__UpdateTaskStatusRequest__TaskStatusUpdate u =
      DOCKER__SWARMKIT__V1__UPDATE_TASK_STATUS_REQUEST__TASK_STATUS_UPDATE__INIT;
  Docker__Swarmkit__V1__UpdateTaskStatusRequest__TaskStatusUpdate *up[1] = {
      &u};
  Docker__Swarmkit__V1__TaskStatus ts = DOCKER__SWARMKIT__V1__TASK_STATUS__INIT;
  switch (c->method) {
  case 0:
    nd.hostname = (char *)node;
    sr.description = &nd;
    sr.session_id = sid;
    pm = &sr.base;
    break;
  case 2:
    ur.session_id = sid;
    u.task_id = (char *)(how & 16 ? "t0" : "t1");
    ts.state = (Docker__Swarmkit__V1__TaskState)((how >> 5) * 64);
    u.status = how & 0x80 ? NULL : &ts;
    ur.n_updates = 1;
    ur.updates = up;
    pm = &ur.base;
    break;
  default: /* the other requests are session_id = 1 alone */
    ar.session_id = sid;
    pm = &ar.base;
    break;
  }
  n = protobuf_c_message_pack(pm, buf);
  FZ_LOG("call %d (method %d): request with session \"%s\"", i, c->method, sid);
  mcp_stream_recv(c->st, buf, n, x->ts);
}

static void view_op(ctx *x, unsigned a, fz_in *in) {
  unsigned op = a % 5, node = fz_u8(in) % NNODES,
           item = fz_u8(in) % NITEMS, ver = fz_u8(in) % 4;
  char coll[64], v[8];
  snprintf(coll, sizeof coll, "node/%s", nodes[node]);
  snprintf(v, sizeof v, "v%u", ver);
  if (op <= 1) {
    /* The body: the object with its id (kind from the name). */
    const char *name = item_names[item];
    const char *id = strchr(name, '/') + 1;
    uint8_t body[64];
    size_t n;
    body[0] = 0x0a;
    body[1] = (uint8_t)strlen(id);
    memcpy(body + 2, id, strlen(id));
    n = 2 + strlen(id);
    /* A version byte in a field both types have free (Task.slot = 5 is a
     * varint; Secret/Config field 5 is unknown): the body changes with
     * the version. */
    body[n++] = 0x28;
    body[n++] = (uint8_t)ver;
    mcp_resource r = {0};
    r.name = name;
    r.version = v;
    r.type_url = name[0] == 't'   ? MCP_DISP_TYPE_TASK
                 : name[0] == 's' ? MCP_DISP_TYPE_SECRET
                                  : MCP_DISP_TYPE_CONFIG;
    r.body = body;
    r.body_len = n;
    (void)mcp_store_upsert(x->view, coll, &r, x->ts);
  } else if (op == 2) {
    (void)mcp_store_delete(x->view, coll, item_names[item], x->ts);
  } else if (op == 3) {
    (void)mcp_store_remove_collection(x->view, coll, x->ts);
  } else {
    mcp_resource r = {0};
    uint8_t body[16] = {0x0a, (uint8_t)strlen(nodes[node])};
    memcpy(body + 2, nodes[node], strlen(nodes[node]));
    r.name = nodes[node];
    r.version = v;
    r.type_url = MCP_DISP_TYPE_NODE;
    r.body = body;
    r.body_len = 2 + strlen(nodes[node]);
    (void)mcp_store_upsert(x->view, MCP_DISP_NODES_COLLECTION, &r, x->ts);
  }
}

/* ---- agent ---- */

static void agent_end(ctx *x, unsigned slot, int status) {
  if (x->as[slot]) {
    mcp_stream_del(x->as[slot]);
    x->as[slot] = NULL;
    x->def->ended(x->def->user_data, slot, status, "fuzz", x->ts);
  }
}

/* Feeds bytes to an agent call: a refused message changes nothing. */
static void agent_recv(ctx *x, unsigned slot, const uint8_t *b, size_t n) {
  if (!x->as[slot]) {
    return;
  }
  mcp_disp_agent_stats before, after;
  char res[64];
  size_t count = mcp_disp_agent_count(x->ag);
  snprintf(res, sizeof res, "%s", mcp_disp_agent_results_in(x->ag));
  mcp_disp_agent_get_stats(x->ag, &before);
  mcp_stream_recv(x->as[slot], b, n, x->ts);
  mcp_disp_agent_get_stats(x->ag, &after);
  FZ_LOG("agent slot %u: %zu bytes, messages %llu -> %llu, held %zu", slot, n,
         (unsigned long long)before.messages,
         (unsigned long long)after.messages, mcp_disp_agent_count(x->ag));
  if (slot != MCP_DISP_SLOT_ASSIGNMENTS) {
    return;
  }
  if (after.messages == before.messages) {
    FZ_CHECK(mcp_disp_agent_count(x->ag) == count, "a refused message "
             "changed the held set");
    FZ_CHECK(strcmp(res, mcp_disp_agent_results_in(x->ag)) == 0,
             "a refused message changed results_in");
    return;
  }
  Docker__Swarmkit__V1__AssignmentsMessage *m =
      docker__swarmkit__v1__assignments_message__unpack(NULL, n, b);
  if (m && m->type == 0) {
    /* What protobuf-c reads: the distinct objects updated, minus those
     * removed after. */
    char keys[64][80];
    int live[64], nk = 0, ok = 1;
    for (size_t i = 0; i < m->n_changes && ok; ++i) {
      const Docker__Swarmkit__V1__Assignment *a = m->changes[i]->assignment;
      const char *id = NULL;
      if (!a) {
        ok = 0;
        break;
      }
      switch (a->item_case) {
      case DOCKER__SWARMKIT__V1__ASSIGNMENT__ITEM_TASK:
        id = a->task->id;
        break;
      case DOCKER__SWARMKIT__V1__ASSIGNMENT__ITEM_SECRET:
        id = a->secret->id;
        break;
      case DOCKER__SWARMKIT__V1__ASSIGNMENT__ITEM_CONFIG:
        id = a->config->id;
        break;
      default:
        continue;
      }
      char key[80];
      snprintf(key, sizeof key, "%d/%s", (int)a->item_case, id);
      int k;
      for (k = 0; k < nk && strcmp(keys[k], key) != 0; ++k) {
      }
      if (k == nk) {
        if (nk == 64) {
          ok = 0;
          break;
        }
        snprintf(keys[nk], 80, "%s", key);
        nk++;
      }
      live[k] = m->changes[i]->action == 0;
    }
    if (ok) {
      size_t want = 0;
      for (int k = 0; k < nk; ++k) {
        want += (size_t)live[k];
      }
      FZ_CHECK(mcp_disp_agent_count(x->ag) == want,
               "COMPLETE: holds %zu, protobuf-c reads %zu",
               mcp_disp_agent_count(x->ag), want);
    }
  }
  if (m) {
    docker__swarmkit__v1__assignments_message__free_unpacked(m, NULL);
  }
}

static void agent_pump(ctx *x, unsigned slot) {
  for (int k = 0; x->as[slot] && k < 8; ++k) {
    mcp_msg *m = NULL;
    int st;
    const char *dt;
    int a = mcp_stream_pump(x->as[slot], x->ts, 1, &m, &st, &dt);
    if (a == MCP_STREAM_SEND) {
      mcp_msg_free(m);
    } else if (a == MCP_STREAM_END) {
      FZ_CHECK(st != MCP_CODE_RESOURCE_EXHAUSTED || x->fm.fired > 0,
               "agent call %u ended %d (%s) with no allocation failed", slot,
               st, dt);
      agent_end(x, slot, st);
    } else if (a == MCP_STREAM_IDLE) {
      break;
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* swarmkit's task rules read arbitrary bytes as a Task (the adapter feeds
 * them documents' encodings): they must never misread or crash. */
static int count_ref(int kind, const char *id, size_t len, void *ud) {
  FZ_CHECK((kind == MCP_DISP_SECRET || kind == MCP_DISP_CONFIG) && id && len,
           "a reference without kind or id");
  ++*(size_t *)ud;
  return 0;
}

static void task_rules(const uint8_t *data, size_t size) {
  mcp_disp_task_info info;
  size_t refs = 0;
  int rv = mcp_disp_task_read(data, size, &info, count_ref, &refs);
  FZ_CHECK(rv == 0 || rv == MCP_ERR_MALFORMED || rv == MCP_ERR_INVALID_ARGUMENT,
           "task_read: %d", rv);
  if (rv == 0) {
    FZ_CHECK(mcp_disp_task_state_name(info.state) != NULL, "unknown state read");
    FZ_CHECK(mcp_disp_task_keeps_held(data, size, data, size, 640),
             "a task past RUNNING differs from itself");
  }
  size_t half = size / 2;
  (void)mcp_disp_task_keeps_held(data, half, data + half, size - half, 640);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const size_t maxch[4] = {1, 2, 3, 100};
  static const unsigned periods[4] = {1, 2, 5, 7};
  fz_in in = {data, size};
  ctx x;
  fz_init_verbose();
  task_rules(data, size);
  uint64_t seed = 7, seed2 = 9;
  memset(&x, 0, sizeof x);
  fz_mem_init(&x.fm);
  unsigned opts = fz_u8(&in);
  x.max_changes = maxch[opts & 3];
  x.debounce = (opts >> 2) & 1;
  x.tls = (opts >> 3) & 1;
  mcp_store_options so;
  mcp_store_options_default(&so);
  so.epoch = 1;
  so.mem = &x.fm.mem;
  if (mcp_store_new(&x.view, &so) != 0) {
    return 0;
  }
  mcp_disp_options o;
  mcp_disp_options_default(&o);
  o.mem = &x.fm.mem;
  o.view = x.view;
  o.rand = fz_rand;
  o.rand_user_data = &seed;
  o.heartbeat_period = periods[(opts >> 4) & 3] * MCP_SECONDS;
  o.debounce = x.debounce ? 10 * MCP_MILLISECONDS : 0;
  o.max_delay = x.debounce ? 50 * MCP_MILLISECONDS : 0;
  o.max_changes = x.max_changes;
  static const char *const mgrs[] = {"127.0.0.1:1"};
  o.managers = mgrs;
  o.nmanagers = 1;
  FZ_CHECK(mcp_disp_new(&x.d, &o, 0) == 0, "mcp_disp_new");
  mcp_disp_agent_options ao;
  mcp_disp_agent_options_default(&ao);
  ao.mem = &x.fm.mem;
  ao.node_id = "node-a";
  ao.rand = fz_rand;
  ao.rand_user_data = &seed2;
  ao.report_state = (opts >> 6) & 1 ? 512 : -1;
  FZ_CHECK(mcp_disp_agent_new(&x.ag, &ao, 0) == 0, "mcp_disp_agent_new");
  x.def = mcp_disp_agent_client_def(x.ag);
  const mcp_service_def *defs;
  FZ_CHECK(mcp_disp_services(x.d, &defs) == 5, "five methods");
  const char *call_node[NCALLS] = {0};

  while (in.n > 0) {
    unsigned op = fz_u8(&in) % D_NOPS;
    unsigned a = fz_u8(&in);
    int i = (int)(a % NCALLS);
    mcall *c = &x.c[i];
    switch (op) {
    case D_OPEN: {
      int method = (int)(a % 5);
      const char *node = nodes[(a >> 3) & 3];
      mcp_peer_info peer = {"fuzz", x.tls, x.tls ? node : NULL, NULL, 0};
      /* The call takes the first free slot. */
      for (i = 0; i < NCALLS && x.c[i].st; ++i) {
      }
      if (i == NCALLS) {
        break;
      }
      c = &x.c[i];
      if (defs[method].open(defs[method].user_data, &peer, x.ts, &c->st) ==
          0) {
        c->method = method;
        call_node[i] = x.tls ? node : NULL;
      } else {
        c->st = NULL;
      }
      break;
    }
    case D_REQ:
      if (c->st) {
        char sid[64];
        send_req(&x, i, &in, sid);
        if (!x.tls) {
          /* In cleartext the node is the session's. */
          call_node[i] = NULL;
          for (int k = 0; k < NNODES; ++k) {
            const char *live = mcp_disp_node_session(x.d, nodes[k], x.ts);
            if (live && strcmp(live, sid) == 0) {
              call_node[i] = nodes[k];
            }
          }
        }
      }
      break;
    case D_RAW: {
      size_t n, want = fz_u8(&in);
      const uint8_t *b = fz_take(&in, want, &n);
      if (c->st) {
        mcp_stream_recv(c->st, b, n, x.ts);
      }
      break;
    }
    case D_HALF:
      if (c->st) {
        mcp_stream_half_close(c->st, x.ts);
      }
      break;
    case D_PUMP:
      pump_call(&x, i);
      if (c->st) {
        check_drained(&x, i, call_node[i]);
      }
      break;
    case D_CLOSE:
      if (c->st) {
        call_drop(&x, i);
      }
      break;
    case D_VIEW:
      view_op(&x, a, &in);
      break;
    case D_ADVANCE: {
      unsigned ms = a | (unsigned)fz_u8(&in) << 8;
      x.ts += (mcp_tstamp)(ms % 20000) * MCP_MILLISECONDS;
      mcp_disp_handle_expiry(x.d, x.ts);
      mcp_tstamp e = mcp_disp_get_expiry(x.d);
      FZ_CHECK(e > x.ts, "registry expiry in the past after handling it");
      break;
    }
    case D_A_OPEN: {
      unsigned slot = a % MCP_DISP_NSLOTS;
      if (!x.as[slot]) {
        mcp_stream *st = NULL;
        if (x.def->open(x.def->user_data, slot, x.ts, &st) == 1) {
          x.as[slot] = st;
        }
      }
      break;
    }
    case D_A_RAW: {
      size_t n, want = fz_u8(&in);
      const uint8_t *b = fz_take(&in, want, &n);
      agent_recv(&x, a % MCP_DISP_NSLOTS, b, n);
      break;
    }
    case D_A_FWD:
      if (c->st && c->method == 4 && c->nout) {
        agent_recv(&x, MCP_DISP_SLOT_ASSIGNMENTS, c->out[0], c->outn[0]);
        free(c->out[0]);
        memmove(c->out, c->out + 1, (size_t)(c->nout - 1) * sizeof c->out[0]);
        memmove(c->outn, c->outn + 1,
                (size_t)(c->nout - 1) * sizeof c->outn[0]);
        c->nout--;
      }
      break;
    case D_A_SESS: {
      Docker__Swarmkit__V1__SessionMessage sm =
          DOCKER__SWARMKIT__V1__SESSION_MESSAGE__INIT;
      char sid[8];
      uint8_t b[32];
      snprintf(sid, sizeof sid, "s%u", a % 3);
      sm.session_id = sid;
      size_t n = docker__swarmkit__v1__session_message__pack(&sm, b);
      agent_recv(&x, MCP_DISP_SLOT_SESSION, b, n);
      break;
    }
    case D_A_PUMP:
      agent_pump(&x, a % MCP_DISP_NSLOTS);
      break;
    case D_A_END:
      agent_end(&x, a % MCP_DISP_NSLOTS, (int)(fz_u8(&in) % 15));
      break;
    case D_FAIL:
      fz_mem_arm(&x.fm, 1 + a % 32);
      break;
    default:
      break;
    }
  }
  fz_mem_disarm(&x.fm);
  for (int i = 0; i < NCALLS; ++i) {
    if (x.c[i].st) {
      call_drop(&x, i);
    }
  }
  for (unsigned s = 0; s < MCP_DISP_NSLOTS; ++s) {
    if (x.as[s]) {
      mcp_stream_del(x.as[s]);
      x.as[s] = NULL;
    }
  }
  mcp_disp_agent_del(x.ag);
  mcp_disp_del(x.d);
  mcp_store_del(x.view);
  FZ_CHECK(x.fm.live == 0, "%ld blocks left", x.fm.live);
  return 0;
}
