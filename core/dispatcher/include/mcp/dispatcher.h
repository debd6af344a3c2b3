/*
 * libmcp: swarmkit's docker.swarmkit.v1.Dispatcher on the engine
 * (engine.h), both sides, sans-I/O (issue 16).
 *
 *   mcp_disp        the manager side: the session registry (one live
 *                   session per node), heartbeats, the task statuses the
 *                   agents report, and the five methods as
 *                   mcp_service_defs for a listening transport.
 *   mcp_disp_agent  the worker side: Session, Heartbeat, Assignments and
 *                   UpdateTaskStatus as an mcp_client_def for a dialing
 *                   transport, applying COMPLETE/INCREMENTAL messages to a
 *                   held set of tasks, secrets and configs.
 *
 * The data (the "Dispatcher view", docs/architecture.md) is an mcp_store
 * the program fills:
 *   collection "node/<node-id>": resources "task/<id>", "secret/<id>",
 *     "config/<id>", body = the encoded docker.swarmkit.v1.Task / Secret /
 *     Config with its id set. Which objects a node gets (tasks assigned to
 *     it with status.state >= ASSIGNED, the secrets and configs they
 *     reference while at RUNNING or below, swarmkit's "a task past ASSIGNED
 *     whose spec did not change keeps its old bytes") is the adapter's
 *     decision; this module sends what the collection holds. Absent and
 *     empty both mean "nothing".
 *   collection "nodes": resource "<node-id>", body = the encoded
 *     docker.swarmkit.v1.Node (optional: fills SessionMessage.node).
 *
 * Conventions of mcp.h: time is an argument, errors are negative
 * mcp_error codes, one thread at a time (the transport's), callbacks never
 * re-enter the object that called them.
 */
#ifndef MCP_DISPATCHER_H
#define MCP_DISPATCHER_H

#include <mcp/engine.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The view store's names (see above). */
#define MCP_DISP_NODES_COLLECTION "nodes"
#define MCP_DISP_NODE_PREFIX "node/"
#define MCP_DISP_TYPE_TASK "type.googleapis.com/docker.swarmkit.v1.Task"
#define MCP_DISP_TYPE_SECRET "type.googleapis.com/docker.swarmkit.v1.Secret"
#define MCP_DISP_TYPE_CONFIG "type.googleapis.com/docker.swarmkit.v1.Config"
#define MCP_DISP_TYPE_NODE "type.googleapis.com/docker.swarmkit.v1.Node"

/* The gRPC method paths. */
#define MCP_DISP_METHOD_SESSION "/docker.swarmkit.v1.Dispatcher/Session"
#define MCP_DISP_METHOD_HEARTBEAT "/docker.swarmkit.v1.Dispatcher/Heartbeat"
#define MCP_DISP_METHOD_UPDATE_TASK_STATUS                                   \
  "/docker.swarmkit.v1.Dispatcher/UpdateTaskStatus"
#define MCP_DISP_METHOD_TASKS "/docker.swarmkit.v1.Dispatcher/Tasks"
#define MCP_DISP_METHOD_ASSIGNMENTS "/docker.swarmkit.v1.Dispatcher/Assignments"

/* Kinds of assigned objects: the field numbers of the Assignment oneof. */
typedef enum mcp_disp_kind {
  MCP_DISP_TASK = 1,
  MCP_DISP_SECRET = 2,
  MCP_DISP_CONFIG = 3
} mcp_disp_kind;

/* "task", "secret", "config" (NULL for another value). Static. */
MCP_EXTERN const char *mcp_disp_kind_name(int kind);

/* The view's names, so that the adapter and this module agree: writes
 * "node/<node>" / "<kind>/<id>" into |buf| (|len| bytes with the NUL,
 * truncating) and returns the length of the whole name, as snprintf. An
 * unknown kind writes "" and returns 0. */
MCP_EXTERN size_t mcp_disp_node_collection(char *buf, size_t len,
                                           const char *node);
MCP_EXTERN size_t mcp_disp_item_name(char *buf, size_t len, int kind,
                                     const char *id);

/* ------------------------------------------------------------------ */
/* Tasks: swarmkit's assignment rules, for the view's adapter          */
/* ------------------------------------------------------------------ */

/* swarmkit's TaskState values (types.proto) the rules name. */
#define MCP_DISP_TASK_ASSIGNED 192
#define MCP_DISP_TASK_RUNNING 512

/* The name of a TaskState ("RUNNING"), NULL when it is not one of
 * swarmkit's; and the state of a name (as types.proto spells it), or -1. */
MCP_EXTERN const char *mcp_disp_task_state_name(int state);
MCP_EXTERN int mcp_disp_task_state_parse(const char *name);

/* What the rules read of an encoded docker.swarmkit.v1.Task. */
typedef struct mcp_disp_task_info {
  const char *node_id; /* into the Task's bytes, not NUL-terminated */
  size_t node_id_len;
  int state;           /* status.state, one of swarmkit's */
} mcp_disp_task_info;

/* Called for each secret (spec.container.secrets[].secretId) and config
 * (configs[].configId) a Task references: |kind| MCP_DISP_SECRET or
 * MCP_DISP_CONFIG, |id| into the Task's bytes (|len| bytes, not
 * NUL-terminated, never empty). Non-zero stops and is returned. */
typedef int (*mcp_disp_ref_fn)(int kind, const char *id, size_t len,
                               void *user_data);

/* Reads |task|: fills |*info| and calls |fn| (may be NULL) for each
 * reference. Errors: MALFORMED (the bytes do not decode),
 * INVALID_ARGUMENT (status.state, in info->state, is not one of
 * swarmkit's), what |fn| returned. */
MCP_EXTERN int mcp_disp_task_read(const uint8_t *task, size_t len,
                                  mcp_disp_task_info *info,
                                  mcp_disp_ref_fn fn, void *user_data);

/* 1 when a task in |state| belongs to its node's assignments
 * (status.state >= ASSIGNED). */
MCP_EXTERN int mcp_disp_task_assigned(int state);

/* 1 when a node holding |held| of a task keeps it rather than receiving
 * |now|, whose state is |now_state|: swarmkit re-sends a task past
 * ASSIGNED only when more than its status and meta changed
 * (TasksEqualStable and State > ASSIGNED, assignments.go:268); at ASSIGNED
 * and below every change goes out. */
MCP_EXTERN int mcp_disp_task_keeps_held(const uint8_t *held, size_t held_len,
                                        const uint8_t *now, size_t now_len,
                                        int now_state);

/* AssignmentChange.action and AssignmentsMessage.type values. */
enum {
  MCP_DISP_UPDATE = 0,
  MCP_DISP_REMOVE = 1,
  MCP_DISP_COMPLETE = 0,
  MCP_DISP_INCREMENTAL = 1
};

/* How streams end when their session goes (gRPC status / details), as
 * swarmkit's loops do at their next turn (dispatcher.go:1124,1455):
 *   the Session stream first sends one more SessionMessage (replaced: the
 *     node as the newer session described it; expired: node.status DOWN
 *     "heartbeat failure"), an Assignments stream its next message (when
 *     the node's collection next changes), a Tasks stream nothing (it ends
 *     at the node's next change); then each ends
 *   expired (no heartbeat for 3 periods) and the node has no newer
 *     session: NOT_FOUND "node not registered";
 *   replaced by a newer Session of the node (or expired, then the node
 *     registered again): INVALID_ARGUMENT "session invalid";
 *   a call naming an unknown, expired or replaced session:
 *     INVALID_ARGUMENT "session invalid"; under TLS, when the certificate's
 *     node has no session at all, NOT_FOUND "node not registered".
 * UpdateTaskStatus for a task in another node's collection of the view:
 * PERMISSION_DENIED "cannot update a task not assigned this node", nothing
 * kept; an update for a task in no node's collection is skipped.
 * ABORTED "node must disconnect" is not used (swarmkit: only a node marked
 * disconnected, which its manager never does, or a stopping dispatcher).
 * Other endings: a request that does not decode, INVALID_ARGUMENT
 * "malformed docker.swarmkit.v1.<Request>"; a Session without node id
 * (no TLS CN, no description.hostname), INVALID_ARGUMENT "no node id: ...";
 * a half-close without request, INVALID_ARGUMENT "no request message"; a
 * second request, INVALID_ARGUMENT (PROTOCOL); too many task statuses,
 * RESOURCE_EXHAUSTED. Unary calls (Heartbeat, UpdateTaskStatus) end OK
 * after their answer once the peer half-closed; Session, Tasks and
 * Assignments stay open after the peer's half-close. */
#define MCP_DISP_ERR_SESSION_INVALID "session invalid"
#define MCP_DISP_ERR_HEARTBEAT "heartbeat failure"
#define MCP_DISP_ERR_DISCONNECT "node must disconnect"
#define MCP_DISP_ERR_NOT_REGISTERED "node not registered"
#define MCP_DISP_ERR_NOT_ASSIGNED "cannot update a task not assigned this node"

/* ------------------------------------------------------------------ */
/* Manager side                                                        */
/* ------------------------------------------------------------------ */

typedef struct mcp_disp mcp_disp;

typedef struct mcp_disp_options {
  const mcp_mem *mem;      /* NULL: libc */
  const mcp_store *view;   /* required; kept by pointer, must outlive */
  /* HeartbeatResponse.period; a session expires 3 periods after its last
   * heartbeat (or its start). 0: 5 s. Jittered by heartbeat_epsilon. */
  mcp_tstamp heartbeat_period;
  /* SessionMessage.managers: addresses (Peer.addr), each with weight 10
   * (swarmkit's DefaultObservationWeight); copied. */
  const char *const *managers;
  size_t nmanagers;
  /* Session ids (required: 16 random bytes per session, as hex). */
  mcp_rand_fn rand;
  void *rand_user_data;
  /* Batching of Assignments/Tasks (mcp_watch_options); the defaults are
   * 100 ms quiet (swarmkit's batchingWaitTime) and at most 10 s (100 x
   * 100 ms, swarmkit's worst case); 0/0: at once. */
  mcp_tstamp debounce;
  mcp_tstamp max_delay;
  /* Changes per AssignmentsMessage (more are split into chained
   * INCREMENTAL messages). 0: 100. */
  size_t max_changes;
  /* Task statuses kept from UpdateTaskStatus (a flood bound: more new ids
   * fail the call with RESOURCE_EXHAUSTED). 0: 65536. */
  size_t max_task_statuses;
  /* ---- V2 (issue 24) ---- */
  /* Peer.node_id of each manager, parallel to |managers| (NULL, or a NULL
   * entry: none); copied. swarmkit sends the raft members' node ids. */
  const char *const *manager_ids;
  /* Each period answered (and each session's first deadline) is
   * heartbeat_period plus a uniform draw in [-epsilon, +epsilon) from
   * |rand|, as swarmkit's periodChooser, so that agents do not beat in
   * step. Default 500 ms (swarmkit's); 0: no jitter; at most half the
   * period (larger is clamped). */
  mcp_tstamp heartbeat_epsilon;
} mcp_disp_options;

#define MCP_DISP_OPTIONS_V1 1
#define MCP_DISP_OPTIONS_V2 2
#define MCP_DISP_OPTIONS_VERSION MCP_DISP_OPTIONS_V2
MCP_EXTERN void mcp_disp_options_default_versioned(int version,
                                                   mcp_disp_options *opts);
#define mcp_disp_options_default(OPTS)                                       \
  mcp_disp_options_default_versioned(MCP_DISP_OPTIONS_VERSION, (OPTS))

/* Creates a manager. On failure |*pd| is untouched. Errors: NOMEM,
 * INVALID_ARGUMENT (no view, no rand, an unknown version). */
MCP_EXTERN int mcp_disp_new_versioned(mcp_disp **pd, int version,
                                      const mcp_disp_options *opts,
                                      mcp_tstamp ts);
#define mcp_disp_new(PD, OPTS, TS)                                           \
  mcp_disp_new_versioned((PD), MCP_DISP_OPTIONS_VERSION, (OPTS), (TS))

/* SessionMessage.node: the view's Node for the session's node (or one
 * with only its id), its description replaced by the one the agent's
 * SessionRequest carried and its status by {READY, addr = the agent's IP
 * from mcp_peer_info.address} (swarmkit's markNodeReady). */

/* Frees the manager. Every stream it opened must have been deleted first
 * (assert): with a transport whose *_del() only starts the shutdown
 * (h2c), after its loop has run the close. The view store is not
 * touched. NULL is a no-op. */
MCP_EXTERN void mcp_disp_del(mcp_disp *d);

/* The five methods, in the order Session, Heartbeat, UpdateTaskStatus,
 * Tasks, Assignments: *defs points into |d| (valid until mcp_disp_del()).
 * Returns 5. Each open() takes the mcp_peer_info: the node is
 * peer->common_name when peer->tls, else SessionRequest.description.
 * hostname; the stream it returns is the caller's (mcp_stream_del()).
 * Stream names (mcp_stream_ops.name, for metrics): "session",
 * "heartbeat", "update_task_status", "tasks", "assignments" (the agent's
 * calls carry the same names). */
MCP_EXTERN size_t mcp_disp_services(mcp_disp *d, const mcp_service_def **defs);

/* Registry timers: when a session expires next (MCP_TSTAMP_MAX: none),
 * and expiring the sessions due at |ts| (their streams are woken). The
 * streams also end on their own timers, and every lookup expires lazily:
 * calling these only frees the memory of sessions without streams sooner.
 */
MCP_EXTERN mcp_tstamp mcp_disp_get_expiry(const mcp_disp *d);
MCP_EXTERN void mcp_disp_handle_expiry(mcp_disp *d, mcp_tstamp ts);

/* The session id live for |node| at |ts|, or NULL. Valid until the next
 * call into |d| or its streams. */
MCP_EXTERN const char *mcp_disp_node_session(const mcp_disp *d,
                                             const char *node, mcp_tstamp ts);

/* One live session, for /debug/syncz. Pointers valid during the callback
 * only. Frozen struct. */
typedef struct mcp_disp_session_info {
  const char *node_id;
  const char *session_id;
  mcp_tstamp expires;       /* 3 periods after the last heartbeat */
  size_t streams;           /* calls attached (Session, Tasks, Assignments) */
  const char *results_in;   /* the last results_in framed on its newest
                               Assignments call ("" for none) */
  uint64_t assignments_messages; /* framed on that call */
} mcp_disp_session_info;

typedef int (*mcp_disp_session_fn)(const mcp_disp_session_info *s,
                                   void *user_data);

/* Calls |fn| for each session in the registry (in no particular order;
 * call mcp_disp_handle_expiry() first to leave out those past their
 * expiry); stops at the first non-zero return and returns it. |fn| must
 * not call into |d|. */
MCP_EXTERN int mcp_disp_sessions(const mcp_disp *d, mcp_disp_session_fn fn,
                                 void *user_data);

/* The latest status an agent reported for one task. Pointers valid during
 * the callback only. */
typedef struct mcp_disp_task_status {
  const char *task_id;
  const char *node_id;       /* the node of the session that reported it */
  int state;                 /* TaskStatus.state (docker.swarmkit.v1) */
  const char *message;       /* TaskStatus.message */
  const char *err;           /* TaskStatus.err */
  const uint8_t *status;     /* the TaskStatus, encoded again from the
                                request as protobuf-c decoded it */
  size_t status_len;
  mcp_tstamp updated;        /* |ts| of the call */
} mcp_disp_task_status;

typedef int (*mcp_disp_task_fn)(const mcp_disp_task_status *st,
                                void *user_data);

/* Calls |fn| for each task status kept (in no particular order); stops at
 * the first non-zero return and returns it. |fn| must not call into |d|. */
MCP_EXTERN int mcp_disp_task_statuses(const mcp_disp *d, mcp_disp_task_fn fn,
                                      void *user_data);

typedef struct mcp_disp_stats {
  uint64_t sessions;          /* live now */
  uint64_t sessions_created;
  uint64_t sessions_replaced;
  uint64_t sessions_expired;
  uint64_t streams;           /* open now (all methods) */
  uint64_t heartbeats;
  uint64_t invalid_session_calls; /* calls refused "session invalid" */
  uint64_t status_updates;    /* TaskStatusUpdates accepted */
  uint64_t task_statuses;     /* tasks with a status kept now */
  uint64_t assignments_messages;
  uint64_t assignments_changes;
  uint64_t tasks_messages;
} mcp_disp_stats;

#define MCP_DISP_STATS_V1 1
#define MCP_DISP_STATS_VERSION MCP_DISP_STATS_V1
MCP_EXTERN int mcp_disp_get_stats_versioned(const mcp_disp *d, int version,
                                            mcp_disp_stats *st);
#define mcp_disp_get_stats(D, ST)                                            \
  mcp_disp_get_stats_versioned((D), MCP_DISP_STATS_VERSION, (ST))

/* ------------------------------------------------------------------ */
/* Agent side                                                          */
/* ------------------------------------------------------------------ */

typedef struct mcp_disp_agent mcp_disp_agent;

/* One change of an Assignments message. Pointers valid during the
 * callback only. */
typedef struct mcp_disp_change {
  int action;             /* MCP_DISP_UPDATE or MCP_DISP_REMOVE */
  int kind;               /* mcp_disp_kind */
  const char *id;
  const uint8_t *object;  /* UPDATE: the encoded Task/Secret/Config;
                             REMOVE: NULL */
  size_t object_len;
} mcp_disp_change;

/* One applied Assignments message. Frozen struct. */
typedef struct mcp_disp_event {
  int type;               /* MCP_DISP_COMPLETE or MCP_DISP_INCREMENTAL */
  const char *applies_to;
  const char *results_in;
  const mcp_disp_change *changes;
  size_t nchanges;
  size_t total;           /* objects held after it */
} mcp_disp_event;

/* Called after each applied message; must not call into the agent. */
typedef void (*mcp_disp_agent_fn)(const mcp_disp_event *ev, void *user_data);

typedef struct mcp_disp_agent_options {
  const mcp_mem *mem;       /* NULL: libc */
  const char *node_id;      /* required: description.hostname (copied) */
  mcp_disp_agent_fn on_message; /* may be NULL */
  void *user_data;
  /* Delay before a new session after a session error (mcp_backoff). */
  mcp_backoff_options backoff;
  mcp_rand_fn rand;         /* backoff jitter; NULL: mcp_backoff's own */
  void *rand_user_data;
  /* >= 0: run every held task through swarmkit's controller states up to
   * this TaskState (a fake executor whose every step succeeds) and report
   * each state passed through UpdateTaskStatus, with its message and
   * timestamp, as agent/exec/controller.go does: ACCEPTED "accepted",
   * PREPARING "preparing", READY "prepared", STARTING "starting", RUNNING
   * "started", COMPLETE "finished"; a task whose desired_state is SHUTDOWN
   * or beyond goes to SHUTDOWN "shutdown" (unless COMPLETE or beyond);
   * none goes past its desired_state but where the controller does
   * (PREPARING, STARTING, RUNNING). The agent's status is canonical: a
   * task the manager re-sends keeps it, and is reported again as it
   * stands (its timestamp unchanged) when no state follows. -1 (the
   * default): never. */
  int report_state;
  /* Heartbeat period used until the manager answers one. 0: 5 s. */
  mcp_tstamp heartbeat_period;
  /* Objects held at most (a flood bound: a message that would hold more
   * is refused). 0: 1 << 20. */
  size_t max_held;
  /* ---- V2 (issue 24) ---- */
  /* Added to |ts| to give TaskStatus.timestamp (nanoseconds since the Unix
   * epoch): the program's wall clock minus its monotonic one. 0: |ts|. */
  int64_t wall_offset;
} mcp_disp_agent_options;

#define MCP_DISP_AGENT_OPTIONS_V1 1
#define MCP_DISP_AGENT_OPTIONS_V2 2
#define MCP_DISP_AGENT_OPTIONS_VERSION MCP_DISP_AGENT_OPTIONS_V2
MCP_EXTERN void mcp_disp_agent_options_default_versioned(
    int version, mcp_disp_agent_options *opts);
#define mcp_disp_agent_options_default(OPTS)                                 \
  mcp_disp_agent_options_default_versioned(MCP_DISP_AGENT_OPTIONS_VERSION,   \
                                           (OPTS))

/* Creates an agent. On failure |*pa| is untouched. Errors: NOMEM,
 * INVALID_ARGUMENT (no node_id, an unknown version). */
MCP_EXTERN int mcp_disp_agent_new_versioned(mcp_disp_agent **pa, int version,
                                            const mcp_disp_agent_options *opts,
                                            mcp_tstamp ts);
#define mcp_disp_agent_new(PA, OPTS, TS)                                     \
  mcp_disp_agent_new_versioned((PA), MCP_DISP_AGENT_OPTIONS_VERSION, (OPTS), \
                               (TS))

/* Frees the agent: every stream it opened must have been deleted first
 * (the transport running its client def stopped). NULL is a no-op. */
MCP_EXTERN void mcp_disp_agent_del(mcp_disp_agent *a);

/* Call slots of the client def. */
enum {
  MCP_DISP_SLOT_SESSION = 0,
  MCP_DISP_SLOT_HEARTBEAT = 1,
  MCP_DISP_SLOT_ASSIGNMENTS = 2,
  MCP_DISP_SLOT_UPDATE_TASK_STATUS = 3,
  MCP_DISP_NSLOTS = 4
};

/* The client def to give a dialing transport (points into |a|, valid
 * until mcp_disp_agent_del()). Behaviour: Session (description.hostname =
 * node) whenever there is none; once a SessionMessage gave an id,
 * Heartbeat at once and then every period answered, and Assignments.
 * A COMPLETE message replaces the held set; an INCREMENTAL one whose
 * applies_to is not the last results_in (a gap) is applied all the same
 * (the last results_in stays), its call ends CANCELLED "assignments gap:
 * ..." and Assignments is called again at once on the same session, as
 * swarmkit's agent (agent/session.go:352). A session error (Session or
 * Heartbeat failing, Assignments refused) starts a new session after the
 * backoff. A malformed Assignments message ends the call
 * (INVALID_ARGUMENT "malformed AssignmentsMessage: <what>") and changes
 * nothing held. The held set survives sessions (a COMPLETE replaces it).
 * Heartbeat and UpdateTaskStatus calls ending INVALID_ARGUMENT or
 * NOT_FOUND also lose the session. With report_state >= 0 (see there),
 * each UpdateTaskStatus call moves every held task one state (at most
 * 1000 tasks per call) and the next call follows when one has more to
 * go; a call that fails is sent again after the next heartbeat. */
MCP_EXTERN const mcp_client_def *mcp_disp_agent_client_def(mcp_disp_agent *a);

/* The session id now, or NULL. Valid until the next call into |a|. */
MCP_EXTERN const char *mcp_disp_agent_session_id(const mcp_disp_agent *a);
/* The last results_in applied ("" before the first message). */
MCP_EXTERN const char *mcp_disp_agent_results_in(const mcp_disp_agent *a);
/* The heartbeat period now (answered, or the option). */
MCP_EXTERN mcp_tstamp mcp_disp_agent_period(const mcp_disp_agent *a);
/* Objects held. */
MCP_EXTERN size_t mcp_disp_agent_count(const mcp_disp_agent *a);
/* Looks one held object up: 1 and |*object|/|*len| (valid until the next
 * call into |a|), or 0. */
MCP_EXTERN int mcp_disp_agent_get(const mcp_disp_agent *a, int kind,
                                  const char *id, const uint8_t **object,
                                  size_t *len);
/* Calls |fn| for every held object (as an UPDATE change); stops at the
 * first non-zero return and returns it. */
typedef int (*mcp_disp_held_fn)(const mcp_disp_change *c, void *user_data);
MCP_EXTERN int mcp_disp_agent_foreach(const mcp_disp_agent *a,
                                      mcp_disp_held_fn fn, void *user_data);

typedef struct mcp_disp_agent_stats {
  uint64_t sessions;        /* sessions obtained */
  uint64_t session_errors;  /* sessions lost (error, mismatch, refusal) */
  uint64_t heartbeats;      /* answered */
  uint64_t messages;        /* Assignments messages applied */
  uint64_t completes;
  uint64_t chain_mismatches;
  uint64_t malformed;
  uint64_t status_reports;  /* TaskStatusUpdates sent */
} mcp_disp_agent_stats;

#define MCP_DISP_AGENT_STATS_V1 1
#define MCP_DISP_AGENT_STATS_VERSION MCP_DISP_AGENT_STATS_V1
MCP_EXTERN int mcp_disp_agent_get_stats_versioned(const mcp_disp_agent *a,
                                                  int version,
                                                  mcp_disp_agent_stats *st);
#define mcp_disp_agent_get_stats(A, ST)                                      \
  mcp_disp_agent_get_stats_versioned((A), MCP_DISP_AGENT_STATS_VERSION, (ST))

#ifdef __cplusplus
}
#endif

#endif /* MCP_DISPATCHER_H */
