/*
 * The script encodings of the fuzz targets, shared with the seed generator
 * (fuzz/gen_corpus.c) so that both read and write the same bytes.
 *
 * Every script is a 4-byte header then actions; an action is one byte
 * (modulo the number of actions of the target) and its operands. Reading
 * past the end gives zeros, so every input is a valid script.
 *
 * fuzz_source_session header:
 *   [service % 3]
 *   [timing: bits 0-1 debounce, 2-3 max_delay, 4-5 NACK retry initial
 *    (k_debounce, k_max_delay, k_retry below), 6 retry max = 8 x initial,
 *    7 send_trigger]
 *   [flags: 0 retry codes {UNAVAILABLE, INVALID_ARGUMENT}, 1 select_store
 *    (node ids starting "alt" get a second store), 2 own type mapping,
 *    3 no event callback, 4-5 store name rules, 6 small store limits,
 *    7 small source limits]
 *   [bits 0-2: fail the n-th allocation of the set-up (0: none); bit 7:
 *    no default store (with select_store: only "alt..." sinks are served)]
 * fuzz_sink_session header:
 *   [service % 3]
 *   [bit 0 incremental, 1-3 journal size, 4 node annotations,
 *    5-6 collections - 1, 7 no apply callback]
 *   [bits 0-1 name rules, 2 small limits, 3 no event callback]
 *   [bits 0-2: fail the n-th allocation of the set-up; 0: none]
 * fuzz_pair header:
 *   [service % 3]
 *   [sink: bit 0 incremental, 1-2 collections - 1, 3 the last collection
 *    is one the store never has until a store operation adds it, 4-7
 *    journal size]
 *   [source timing, as fuzz_source_session]
 *   [bits 0-3 collections declared (empty) at the start, 4 retry code
 *    INVALID_ARGUMENT instead of UNAVAILABLE]
 */
#ifndef MCP_FUZZ_SCRIPT_H
#define MCP_FUZZ_SCRIPT_H

#include "mcp/mcp.h"

/* fuzz_source_session actions and their operands. */
enum {
  SRC_RECV_RAW,  /* u16 length (% SCRIPT_RAW_MAX), bytes: a request */
  SRC_RECV,      /* a request built from fields (see act_recv) */
  SRC_STORE,     /* which store (bit 0, with select_store), a store op */
  SRC_ADVANCE,   /* u16: see fz_src_advance() */
  SRC_DRAIN,     /* handle expiry, then next() until nothing */
  SRC_NEXT,      /* one want_write() + next() */
  SRC_EXPIRY,    /* u8 % 3: 0 if due, 1 jump to the expiry, 2 always */
  SRC_STATUS,    /* introspection */
  SRC_RECONNECT, /* a new session on the same stores */
  SRC_FAIL,      /* u8: fail the (1 + u8 % 48)-th allocation from now */
  SRC_NOPS
};

/* fuzz_sink_session actions. */
enum {
  SNK_RECV_RAW,  /* u8 decision (k_reject[u8 % 8]; bit 3: fill the whole
                    message), string message, u16 length, bytes: a push */
  SNK_RECV,      /* a push built from fields (see act_recv) */
  SNK_DRAIN,     /* next() until nothing */
  SNK_NEXT,      /* one want_write() + next() */
  SNK_RECONNECT, /* a new session on the same state */
  SNK_STATUS,    /* introspection and journal */
  SNK_ADVANCE,   /* u16 milliseconds */
  SNK_FAIL,      /* u8: fail the (1 + u8 % 48)-th allocation from now */
  SNK_NOPS
};

/* fuzz_pair actions. */
enum {
  PAIR_STORE,     /* a store op */
  PAIR_SOURCE,    /* the source produces one message */
  PAIR_DOWN,      /* u8 how: deliver one push (bit 0 lose it, bit 1 end
                     the stream on NOMEM) */
  PAIR_SINK,      /* the sink produces one message */
  PAIR_UP,        /* u8 how: deliver one request */
  PAIR_ADVANCE,   /* u8: (u8 % 64) / 2 ms, then expiry if due */
  PAIR_EXPIRY,    /* jump to the expiry and handle it */
  PAIR_REJECT,    /* u8 % 4: the application rejects with k_reject[] */
  PAIR_RECONNECT, /* both sessions replaced */
  PAIR_FAIL,      /* u8: fail the (1 + u8 % 32)-th allocation from now */
  PAIR_NOPS
};

#define SCRIPT_RAW_MAX 4096

static const mcp_tstamp k_debounce[4] = {0, 1 * MCP_MILLISECONDS,
                                         5 * MCP_MILLISECONDS,
                                         50 * MCP_MILLISECONDS};
static const mcp_tstamp k_max_delay[4] = {0, 2 * MCP_MILLISECONDS,
                                          10 * MCP_MILLISECONDS,
                                          100 * MCP_MILLISECONDS};
static const mcp_tstamp k_retry[4] = {0, 1 * MCP_MILLISECONDS,
                                      4 * MCP_MILLISECONDS,
                                      20 * MCP_MILLISECONDS};

/* The time SRC_ADVANCE adds: (v & 0x3ff) / 4 ms, plus (v & 0x3ff) s when
 * bit 15 is set. */
static inline mcp_tstamp fz_src_advance(unsigned v) {
  return (mcp_tstamp)(v & 0x3ff) * MCP_MILLISECONDS / 4 +
         ((v & 0x8000) ? (mcp_tstamp)(v & 0x3ff) * MCP_SECONDS : 0);
}

/* The store epoch seeds (fz_rand) of the targets. */
#define FZ_SRC_SEED 0x5eedULL
#define FZ_PAIR_SEED 7ULL

#endif
