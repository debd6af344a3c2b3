/*
 * Typed bodies on the command line (issue 15), for both programs:
 *   --descriptor-set FILE  a serialized FileDescriptorSet
 *                          (protoc --include_imports --descriptor_set_out)
 *                          whose types are added to Istio 1.6's, built in
 *   --kind GROUP/VERSION/KIND=full.message.Name   (mcp-source)
 *                          documents of that kind have bodies of that
 *                          message; VERSION/KIND for the core group
 *   --body typed|struct    (mcp-source) typed (default), or Struct bodies
 *                          everywhere, for sinks older than typed bodies
 */
#ifndef TOOLS_SCHEMA_ARGS_H
#define TOOLS_SCHEMA_ARGS_H

#include <stddef.h>

#include <mcp/schema.h>

#include "cli/args.h"

/* One --kind. */
typedef struct tool_kind {
  char *api_version; /* "networking.istio.io/v1alpha3", "v1" */
  char *kind;
  char *message;
} tool_kind;

typedef struct tool_schema_args {
  tool_strv sets; /* --descriptor-set, borrowed from argv */
  tool_kind *kinds; /* --kind, owned */
  size_t nkinds;
  int body_struct; /* --body struct */
} tool_schema_args;

/*
 * If argv[*i] is one of the flags (--kind and --body only when |source|):
 * parses it into |a|, advances |*i| past its value and returns 1. Returns 0
 * for another argument, -1 for a usage error (reported on stderr as
 * "PROG: ..."), -2 when out of memory.
 */
int tool_schema_parse_arg(int argc, char **argv, int *i, tool_schema_args *a,
                          int source);

void tool_schema_args_free(tool_schema_args *a);

/*
 * The schema: Istio 1.6's types, swarmkit's (tools/views/schema_swarmkit.h),
 * then each --descriptor-set file in order,
 * then a check that every --kind names a message it has. Returns 0 with
 * |*ps| (free with mcp_schema_free()), or -1 with the reason in |why|
 * ("--descriptor-set F: ..."; "--kind K: no message M in the schema").
 */
int tool_schema_load(const tool_schema_args *a, mcp_schema **ps, char *why,
                     size_t whylen);

#endif /* TOOLS_SCHEMA_ARGS_H */
