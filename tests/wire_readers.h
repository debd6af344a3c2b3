/*
 * The inline field reader against the exported one, for tests and
 * fuzz_codec: both must answer alike for the same bytes (mcp/engine.h).
 */
#ifndef MCP_TEST_WIRE_READERS_H
#define MCP_TEST_WIRE_READERS_H

#include "mcp/engine.h"

/* Steps mcp_wire_field_next() and mcp_wire_next() over |in[0..n)|: 1 when
 * they gave the same result, field, value, payload and position at every
 * step, else 0 with |*at| the offset of the field where they differed. */
static inline int wire_readers_agree(const uint8_t *in, size_t n,
                                     size_t *at) {
  mcp_wire a = {in, in + n}, b = {in, in + n};
  for (;;) {
    mcp_wire_field f;
    uint32_t num;
    int wt;
    uint64_t v;
    const uint8_t *d;
    size_t dl;
    *at = (size_t)(b.p - in);
    int ra = mcp_wire_field_next(&a, &f);
    int rb = mcp_wire_next(&b, &num, &wt, &v, &d, &dl);
    if (ra != rb) {
      return 0;
    }
    if (ra != 1) {
      return 1;
    }
    if (f.num != num || f.wt != wt || f.v != v || f.data != d ||
        f.len != dl || a.p != b.p) {
      return 0;
    }
  }
}

#endif /* MCP_TEST_WIRE_READERS_H */
