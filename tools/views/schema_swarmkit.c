/* swarmkit's types, built in: schema_swarmkit.h. */
#include "views/schema_swarmkit.h"

#include <stdint.h>

extern const uint8_t tool_swarmkit_set[];
extern const size_t tool_swarmkit_set_len;

static const tool_swarmkit_kind kinds[] = {
    {TOOL_SWARMKIT_API_VERSION, "Task", "docker.swarmkit.v1.Task"},
    {TOOL_SWARMKIT_API_VERSION, "Secret", "docker.swarmkit.v1.Secret"},
    {TOOL_SWARMKIT_API_VERSION, "Config", "docker.swarmkit.v1.Config"},
    {TOOL_SWARMKIT_API_VERSION, "Node", "docker.swarmkit.v1.Node"},
};

int tool_schema_add_swarmkit(mcp_schema *s, mcp_schema_error *err) {
  return mcp_schema_add_descriptor_set(s, tool_swarmkit_set,
                                       tool_swarmkit_set_len, err);
}

const tool_swarmkit_kind *tool_swarmkit_kinds(size_t *n) {
  *n = sizeof kinds / sizeof *kinds;
  return kinds;
}
