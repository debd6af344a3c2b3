/* The table of transports. A new transport adds a row (and its file). The
 * build defines TOOLS_HAVE_<NAME> for each transport it links in. */
#include "transport.h"

#include <stddef.h>
#include <string.h>

static const struct {
  const char *name;
  const tool_transport *impl; /* NULL: known, not built into this program */
} transports[] = {
#ifdef TOOLS_HAVE_GRPC
    {"grpc", &tool_transport_grpc},
#else
    {"grpc", NULL},
#endif
#ifdef TOOLS_HAVE_H2C
    {"h2c", &tool_transport_h2c},
#else
    {"h2c", NULL},
#endif
};

#define NTRANSPORTS (sizeof(transports) / sizeof(transports[0]))

int tool_transport_find(const char *name, const tool_transport **pt) {
  for (size_t i = 0; i < NTRANSPORTS; i++) {
    if (strcmp(name, transports[i].name) == 0) {
      if (!transports[i].impl)
        return -2;
      *pt = transports[i].impl;
      return 0;
    }
  }
  return -1;
}

const char *tool_transport_default(void) {
  for (size_t i = 0; i < NTRANSPORTS; i++) {
    if (transports[i].impl)
      return transports[i].name;
  }
  return transports[0].name; /* none built: refused when looked up */
}
