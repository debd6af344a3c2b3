/*
 * disp_view: the Dispatcher view store (BRIEF "View stores") kept from the
 * swarmkit Tasks, Secrets, Configs and Nodes of an MCP store. Internal to
 * tools/.
 *
 * Input: four collections of |src| (defaults DISP_VIEW_TASKS, ... below:
 * what the loader names documents of apiVersion swarmkit.docker.com/v1),
 * resources named "<id>" (or "<ns>/<id>": the id is the last segment),
 * bodies either typed (type_url type.googleapis.com/docker.swarmkit.v1.Task
 * etc., the loader's typed bodies) or google.protobuf.Struct of the same
 * object in proto3 JSON form, encoded with |schema| (which must then hold
 * docker.swarmkit.v1.*; without it such bodies are counted bad and
 * ignored).
 *
 * Output, in |view|:
 *   "node/<node-id>": for each task with node_id == node-id and
 *     status.state >= ASSIGNED, "task/<id>" (the Task with `id` set); for
 *     every secret and config such a task references
 *     (spec.container.secrets[].secretId, configs[].configId) and present,
 *     while the task's state is RUNNING or below, "secret/<id>",
 *     "config/<id>" (swarmkit releases a finished task's dependencies).
 *     swarmkit's rule: a task published on a node whose new status.state >
 *     ASSIGNED and which changed in nothing but its status and meta keeps
 *     the bytes published (no upsert). A node
 *     that had something and has nothing left keeps an empty collection.
 *   "nodes": "<node-id>" -> the Node with `id` set.
 * type_urls "type.googleapis.com/docker.swarmkit.v1.Task|Secret|Config|
 * Node"; versions a hash of the body.
 *
 * Cost: disp_view_sync() takes the changes of the four collections through
 * mcp_watch (O(changed)) and rewrites only the node collections they
 * touch (one mcp_store_replace() each).
 *
 * Threads: none of its own; call it where |src| and |view| change.
 */
#ifndef TOOLS_DISP_VIEW_H
#define TOOLS_DISP_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include <mcp/engine.h>
#include <mcp/mcp.h>
#include <mcp/schema.h>

#define DISP_VIEW_TASKS "k8s/swarmkit.docker.com/v1/tasks"
#define DISP_VIEW_SECRETS "k8s/swarmkit.docker.com/v1/secrets"
#define DISP_VIEW_CONFIGS "k8s/swarmkit.docker.com/v1/configs"
#define DISP_VIEW_NODES "k8s/swarmkit.docker.com/v1/nodes"
#define DISP_VIEW_URL_PREFIX "type.googleapis.com/docker.swarmkit.v1."

typedef struct disp_view disp_view;

typedef struct disp_view_options {
  /* Source collections; NULL: the defaults above. */
  const char *tasks, *secrets, *configs, *nodes;
  /* For Struct bodies (borrowed; must outlive the view); NULL: none. */
  const mcp_schema *schema;
} disp_view_options;

typedef struct disp_view_stats {
  uint64_t syncs;      /* disp_view_sync() calls that changed the view */
  uint64_t nodes;      /* node collections recomputed */
  uint64_t kept;       /* task updates not published (past ASSIGNED) */
  uint64_t bad_bodies; /* bodies that could not be read (ignored) */
} disp_view_stats;

/*
 * Creates the adapter. |src| and |view| are kept by pointer (both must
 * outlive it); |opts| (NULL: defaults) is copied, its strings too. Errors:
 * NOMEM, and what mcp_watch_new() returns.
 */
int disp_view_new(disp_view **pv, const mcp_store *src, mcp_store *view,
                  const disp_view_options *opts);
void disp_view_del(disp_view *v); /* NULL is a no-op */

/*
 * Brings |view| up to date with |src| at |ts|. Returns the number of view
 * collections rewritten (node collections, plus 1 when "nodes" changed).
 * Errors: NOMEM (what was not finished is finished by the next sync).
 */
int disp_view_sync(disp_view *v, mcp_tstamp ts);

void disp_view_get_stats(const disp_view *v, disp_view_stats *st);

/* What the last body counted in bad_bodies was, and why: "<name>:
 * <reason>" ("" before any). Valid until the next disp_view_sync(). */
const char *disp_view_why(const disp_view *v);

#endif /* TOOLS_DISP_VIEW_H */
