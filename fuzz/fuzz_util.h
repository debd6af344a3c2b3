/*
 * Shared pieces of the libFuzzer targets (fuzz/fuzz_*.c) and of the seed
 * generator (fuzz/gen_corpus.c):
 *   - fz_in: reads the fuzz input as a script (bytes past the end read as 0,
 *     so every input is a valid script);
 *   - fz_out: writes scripts (the generator);
 *   - fz_mem: an mcp_mem that counts live blocks and fails the k-th
 *     allocation from the moment it is armed;
 *   - the fixed names, collections and type URLs scripts pick from;
 *   - store operations (upsert, delete, replace, add_collection) decoded
 *     from the script, with their result checked.
 *
 * Script encoding: docs in fuzz/README.md. Everything here is
 * deterministic: the same input always runs the same calls.
 */
#ifndef MCP_FUZZ_UTIL_H
#define MCP_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "mcp/mcp.h"

/* ---- failing loudly ---- */

/* Prints the failed check and aborts (libFuzzer reports a crash). */
#define FZ_CHECK(cond, ...)                                        \
  do {                                                             \
    if (!(cond)) {                                                 \
      fz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);             \
    }                                                              \
  } while (0)

#if defined(__GNUC__) || defined(__clang__)
__attribute__((noreturn, format(printf, 4, 5)))
#endif
void fz_fail(const char *file, int line, const char *cond, const char *fmt, ...);

/* MCP_FUZZ_VERBOSE=1 in the environment prints every action (to stderr). */
extern int fz_verbose;
void fz_init_verbose(void);
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 1, 2)))
#endif
void fz_log_(const char *fmt, ...);
#define FZ_LOG(...)       \
  do {                    \
    if (fz_verbose) {     \
      fz_log_(__VA_ARGS__); \
    }                     \
  } while (0)

/* Hex of up to 200 bytes of |p| into |buf| (at least 404 bytes), for
 * reports. Returns |buf|. */
char *fz_hex(char *buf, const uint8_t *p, size_t n);

/* ---- reading the script ---- */

typedef struct fz_in {
  const uint8_t *p;
  size_t n;
} fz_in;

uint8_t fz_u8(fz_in *in);
uint16_t fz_u16(fz_in *in); /* little endian */
/* Up to |want| bytes (fewer at the end); sets |*got|. */
const uint8_t *fz_take(fz_in *in, size_t want, size_t *got);
/* A length byte (modulo |cap|) then that many raw bytes into |buf|
 * (|cap| + 1 bytes), NUL-terminated. Returns the length read. The bytes are
 * raw: they may hold NULs (the C string then ends there) or invalid UTF-8. */
size_t fz_str(fz_in *in, char *buf, size_t cap);

/* ---- writing scripts (the generator) ---- */

typedef struct fz_out {
  uint8_t *p;
  size_t n, cap;
} fz_out;

void fw_u8(fz_out *o, unsigned v);
void fw_u16(fz_out *o, unsigned v);
void fw_bytes(fz_out *o, const void *p, size_t n);
void fw_str(fz_out *o, const char *s); /* as fz_str() reads it */
void fw_free(fz_out *o);

/* ---- counting, failing allocator ---- */

typedef struct fz_mem {
  mcp_mem mem;
  long live;    /* blocks allocated and not freed */
  long count;   /* allocations attempted */
  long fail_at; /* the allocation (count) to fail; 0: none armed */
  long fired;   /* allocations failed so far */
} fz_mem;

void fz_mem_init(fz_mem *m);
/* Fails the |k|-th allocation from now (1: the next one). */
void fz_mem_arm(fz_mem *m, unsigned k);
void fz_mem_disarm(fz_mem *m);

/*
 * Checks the result of one call that may allocate: when it met a failed
 * allocation it must return MCP_ERR_NOMEM; it may return NOMEM only then.
 * |fired_before| is m->fired before the call.
 */
void fz_check_nomem(const fz_mem *m, long fired_before, int rv,
                    const char *what);

/* A deterministic mcp_rand_fn: |user_data| is a uint64_t seed. */
void fz_rand(uint8_t *dest, size_t len, void *user_data);

/* ---- what scripts pick from ---- */

#define FZ_NNAMES 8
extern const char *const fz_names[FZ_NNAMES];
/* Store collections: the first FZ_NTYPES are what fz_types map to by
 * default (mcp_collection_for_type_url); the last one is only ever added
 * by a store operation. */
#define FZ_NCOLLS 5
#define FZ_NTYPES 5
extern const char *const fz_colls[FZ_NCOLLS];
extern const char *const fz_types[FZ_NTYPES];
#define FZ_BODY_TYPE "type.googleapis.com/test.Body"

/* The i-th key of a subscription for |service|: a collection (RESOURCE)
 * or a type URL (aggregated). */
const char *fz_key(mcp_service service, size_t i);

/* ---- store operations ---- */

enum {
  FZ_ST_UPSERT = 0,
  FZ_ST_DELETE = 1,
  FZ_ST_REPLACE = 2,
  FZ_ST_ADD = 3,
  FZ_ST_BULK = 4,
  FZ_ST_NOPS = 5
};

/*
 * Reads a store operation (a byte: the operation modulo FZ_ST_NOPS) and
 * its operands, and runs it on |st| at |ts|,
 * checking: the result is one of those documented; the generation advances
 * by exactly one when the call says the collection changed and not at all
 * otherwise; the versions held change only on a change; NOMEM only when an
 * allocation failed. Returns the call's result.
 *
 * Operands:
 *   UPSERT  coll name ver body extra [raw name] [labels...]
 *   DELETE  coll name
 *   REPLACE coll mask flags {ver body}* per set bit of mask
 *   ADD     coll
 *   BULK    coll n mode start: n upserts (mode bit 0 clear) or deletes of
 *           the generated names "g<start + i>" (tombstones by the dozen:
 *           compaction of the change log)
 * coll: index into fz_colls (modulo FZ_NCOLLS + 1; the extra value is "",
 * which the store refuses). name: index into fz_names (low 3 bits); 0xff:
 * a raw string follows; 0xfe: a byte k follows, the name is "g<k>". ver: 0 NULL (generated), 1 "", 2 the version held
 * (when any), 3 a raw string follows, else "v<ver>". body: fz_str (32).
 * extra bits: 0 a label, 1 an annotation, 2 create_time (3: with invalid
 * nanos), 4 no body type, 5 body absent.
 */
int fz_store_op(fz_in *in, mcp_store *st, const fz_mem *m, mcp_tstamp ts);

/* Writers of the same operations (operation byte and operands), for the
 * generator. |ver|: 0 a generated version, n >= 4 "v<n>". */
void fw_upsert(fz_out *o, unsigned coll, unsigned name, unsigned ver,
               const char *body);
void fw_delete(fz_out *o, unsigned coll, unsigned name);
/* |vers|/|bodies| have one entry per set bit of |mask|, in bit order. */
void fw_replace(fz_out *o, unsigned coll, unsigned mask, const unsigned *vers,
                const char *const *bodies);
void fw_add(fz_out *o, unsigned coll);
void fw_bulk(fz_out *o, unsigned coll, unsigned n, int del, unsigned start);

#endif
