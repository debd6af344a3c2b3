/*
 * protobuf-c's allocator bridged to an mcp_mem, for protocol modules that
 * unpack with protobuf-c's generated code. protobuf-c cannot tell a failed
 * allocation from bad input, so the bridge remembers the failure: check
 * |failed| after a NULL unpack to return NOMEM rather than MALFORMED.
 * Needs protobuf-c's header (libprotobuf-c); the rest of the engine does
 * not.
 */
#ifndef MCP_PBALLOC_H
#define MCP_PBALLOC_H

#include <protobuf-c/protobuf-c.h>

#include <mcp/engine.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mcp_pballoc {
  ProtobufCAllocator a;
  const mcp_mem *mem;
  int failed;
} mcp_pballoc;

/* Points |pa->a| at |mem| (kept by pointer: it must outlive |pa|). */
MCP_EXTERN void mcp_pballoc_init(mcp_pballoc *pa, const mcp_mem *mem);

#ifdef __cplusplus
}
#endif

#endif /* MCP_PBALLOC_H */
