/* The table of transports. A new transport adds a row (and its file). */
#include "transport.h"

#include <stddef.h>
#include <string.h>

static const struct {
  const char *name;
  const tool_transport *impl; /* NULL: known, not available yet */
} transports[] = {
    {"grpc", &tool_transport_grpc},
    {"h2c", NULL},
};

int tool_transport_find(const char *name, const tool_transport **pt) {
  for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++) {
    if (strcmp(name, transports[i].name) == 0) {
      if (!transports[i].impl)
        return -2;
      *pt = transports[i].impl;
      return 0;
    }
  }
  return -1;
}
