/*
 * swarmkit's types built into the programs (the Dispatcher's objects as
 * typed bodies): the descriptors of docker/swarmkit api/objects.proto and
 * api/dispatcher.proto (compiled by protoc at build time) and the kinds
 * issue 16 names. Internal to tools/.
 */
#ifndef TOOLS_SCHEMA_SWARMKIT_H
#define TOOLS_SCHEMA_SWARMKIT_H

#include <stddef.h>

#include <mcp/schema.h>

#define TOOL_SWARMKIT_API_VERSION "swarmkit.docker.com/v1"

/* One kind: apiVersion swarmkit.docker.com/v1, the kind, its message. */
typedef struct tool_swarmkit_kind {
  const char *api_version;
  const char *kind;    /* "Task" */
  const char *message; /* "docker.swarmkit.v1.Task" */
} tool_swarmkit_kind;

/* Adds the built-in set to |s| (mcp_schema_add_descriptor_set(), its
 * errors; twice is a no-op). */
int tool_schema_add_swarmkit(mcp_schema *s, mcp_schema_error *err);

/* The four kinds (Task, Secret, Config, Node): |*n| entries, static. */
const tool_swarmkit_kind *tool_swarmkit_kinds(size_t *n);

#endif /* TOOLS_SCHEMA_SWARMKIT_H */
