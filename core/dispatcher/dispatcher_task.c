/*
 * swarmkit's rules on what a node is assigned, read from encoded Tasks
 * (mcp/dispatcher.h, "Tasks"), so that a program's view adapter decides
 * membership the way swarmkit's dispatcher does without knowing the
 * Task's wire layout. Field numbers: api/objects.proto, specs.proto,
 * types.proto of swarmkit 3e72cb64d.
 */
#include "mcp/pballoc.h" /* the engine's public API only */

#include "mcp/dispatcher.h"

enum {
  TASK_META = 2,
  TASK_SPEC = 3,
  TASK_NODE_ID = 6,
  TASK_STATUS = 9,
  STATUS_STATE = 2,
  SPEC_CONTAINER = 1,
  CONTAINER_SECRETS = 12,
  CONTAINER_CONFIGS = 21,
  REF_ID = 1 /* SecretReference.secret_id, ConfigReference.config_id */
};

static const struct {
  int v;
  const char *n;
} states[] = {{0, "NEW"},        {64, "PENDING"},   {192, "ASSIGNED"},
              {256, "ACCEPTED"}, {320, "PREPARING"}, {384, "READY"},
              {448, "STARTING"}, {512, "RUNNING"},   {576, "COMPLETE"},
              {640, "SHUTDOWN"}, {704, "FAILED"},    {768, "REJECTED"},
              {800, "REMOVE"},   {832, "ORPHANED"}};

const char *mcp_disp_task_state_name(int state) {
  for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); ++i) {
    if (states[i].v == state) {
      return states[i].n;
    }
  }
  return NULL;
}

int mcp_disp_task_state_parse(const char *name) {
  for (size_t i = 0; name && i < sizeof(states) / sizeof(states[0]); ++i) {
    if (strcmp(states[i].n, name) == 0) {
      return states[i].v;
    }
  }
  return -1;
}

int mcp_disp_task_assigned(int state) { return state >= MCP_DISP_TASK_ASSIGNED; }

/* The last LEN field |field| of |msg| (protobuf: the last one wins; a
 * nested message split in parts is not merged, which swarmkit never
 * writes): 1 and its payload, 0 when absent, MALFORMED. */
static int get_len(const uint8_t *msg, size_t len, uint32_t field,
                   const uint8_t **d, size_t *n) {
  if (!len) {
    return 0; /* (msg may be NULL: no arithmetic on it) */
  }
  mcp_wire w = {msg, msg + len};
  mcp_wire_field fd;
  int rv, found = 0;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.num == field) {
      if (fd.wt != MCP_WT_LEN) {
        return MCP_ERR_MALFORMED;
      }
      *d = fd.data;
      *n = fd.len;
      found = 1;
    }
  }
  return rv < 0 ? rv : found;
}

static int get_varint(const uint8_t *msg, size_t len, uint32_t field,
                      uint64_t *out) {
  if (!len) {
    return 0;
  }
  mcp_wire w = {msg, msg + len};
  mcp_wire_field fd;
  int rv;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.num == field) {
      if (fd.wt != MCP_WT_VARINT) {
        return MCP_ERR_MALFORMED;
      }
      *out = fd.v;
    }
  }
  return rv < 0 ? rv : 0;
}

int mcp_disp_task_read(const uint8_t *task, size_t len,
                       mcp_disp_task_info *info, mcp_disp_ref_fn fn,
                       void *user_data) {
  const uint8_t *d;
  size_t n;
  int r;
  memset(info, 0, sizeof(*info));
  info->node_id = "";
  if ((r = get_len(task, len, TASK_NODE_ID, &d, &n)) < 0) {
    return r;
  }
  if (r) {
    info->node_id = (const char *)d;
    info->node_id_len = n;
  }
  uint64_t state = 0;
  if ((r = get_len(task, len, TASK_STATUS, &d, &n)) < 0 ||
      (r && (r = get_varint(d, n, STATUS_STATE, &state)) < 0)) {
    return r;
  }
  info->state = state > INT32_MAX ? INT32_MAX : (int)state;
  if (!mcp_disp_task_state_name(info->state)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  const uint8_t *spec, *cont;
  size_t slen, clen;
  if ((r = get_len(task, len, TASK_SPEC, &spec, &slen)) <= 0 ||
      (r = get_len(spec, slen, SPEC_CONTAINER, &cont, &clen)) <= 0) {
    return r;
  }
  mcp_wire w = {cont, cont + clen};
  mcp_wire_field fd;
  while ((r = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.num != CONTAINER_SECRETS && fd.num != CONTAINER_CONFIGS) {
      continue;
    }
    const uint8_t *id = NULL; /* set when get_len() answers 1 */
    size_t idlen = 0;
    int q = fd.wt == MCP_WT_LEN
                ? get_len(fd.data, fd.len, REF_ID, &id, &idlen)
                : MCP_ERR_MALFORMED;
    if (q < 0) {
      return q;
    }
    if (q && idlen && fn &&
        (q = fn(fd.num == CONTAINER_SECRETS ? MCP_DISP_SECRET
                                            : MCP_DISP_CONFIG,
                (const char *)id, idlen, user_data)) != 0) {
      return q;
    }
  }
  return r < 0 ? r : 0;
}

/* The next field of |w| other than status and meta: 1 with its whole
 * encoding in |*start|/|*n|, 0 at the end, MALFORMED. */
static int next_stable(mcp_wire *w, const uint8_t **start, size_t *n) {
  for (;;) {
    const uint8_t *s = w->p;
    mcp_wire_field fd;
    int r = mcp_wire_field_next(w, &fd);
    if (r <= 0) {
      return r;
    }
    if (fd.num != TASK_STATUS && fd.num != TASK_META) {
      *start = s;
      *n = (size_t)(w->p - s);
      return 1;
    }
  }
}

int mcp_disp_task_keeps_held(const uint8_t *held, size_t held_len,
                             const uint8_t *now, size_t now_len,
                             int now_state) {
  /* swarmkit (assignments.go addOrUpdateTask, dispatcher.go Tasks): states
   * up to ASSIGNED are the scheduler's and always go out; past it, only a
   * change beyond status and meta does (TasksEqualStable). */
  if (now_state <= MCP_DISP_TASK_ASSIGNED) {
    return 0;
  }
  if (!held_len || !now_len) {
    return held_len == now_len; /* two empty Tasks are the same */
  }
  mcp_wire a = {held, held + held_len}, b = {now, now + now_len};
  for (;;) {
    const uint8_t *pa = NULL, *pb = NULL;
    size_t na = 0, nb = 0;
    int ra = next_stable(&a, &pa, &na), rb = next_stable(&b, &pb, &nb);
    if (ra < 0 || rb < 0 || ra != rb) {
      return 0;
    }
    if (ra == 0) {
      return 1;
    }
    if (na != nb || memcmp(pa, pb, na) != 0) {
      return 0;
    }
  }
}
