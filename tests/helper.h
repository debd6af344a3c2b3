/*
 * Test helpers: a deterministic rand, an allocator that counts and fails on
 * demand, and peer messages built from structs with protobuf-c (an encoder
 * independent of the core's hand-written one).
 */
#ifndef MCP_TEST_HELPER_H
#define MCP_TEST_HELPER_H

#include <stddef.h>
#include <stdint.h>

#include "mcp/mcp.h"
#include "mcp/v1alpha1/mcp.pb-c.h"

/* Deterministic rand: fills with a counter-based sequence from *user_data
 * (a uint64_t seed). */
void th_rand(uint8_t *dest, size_t len, void *user_data);

/* An allocator that counts live blocks and fails the |fail_at|-th
 * allocation (1-based; 0 = never) and every one after it when |sticky|. */
typedef struct th_mem {
  mcp_mem mem;
  long live;       /* blocks allocated and not freed */
  long count;      /* allocations attempted */
  long fail_at;
  int sticky;
  int failed;      /* an allocation was failed */
} th_mem;
void th_mem_init(th_mem *m, long fail_at);

/* A store with a fixed epoch 0x1234 and the given allocator (NULL: libc). */
mcp_store *th_store(const mcp_mem *mem);

/* A resource with a body of type_url "type.googleapis.com/test.Body" and
 * |body| as value bytes. |version| may be NULL. */
mcp_resource th_res(const char *name, const char *version, const char *body);

/* Upserts th_res(name, version, body) and checks the call succeeded. */
void th_put(mcp_store *st, const char *coll, const char *name,
            const char *version, const char *body, mcp_tstamp ts);

/* Encodes a RequestResources. |initial| is a NULL-terminated list of
 * name, version pairs (or NULL). |code| != 0 adds error_detail. Returns
 * malloc'd bytes and their length in |*len|. */
uint8_t *th_request(size_t *len, const char *node_id, const char *collection,
                    const char *nonce, int incremental,
                    const char *const *initial, int code, const char *msg);

/* Encodes a Resources message from protobuf-c structs: |names| and
 * |versions| are parallel NULL-terminated lists (versions may be NULL),
 * |removed| NULL-terminated (or NULL). */
uint8_t *th_resources(size_t *len, const char *collection, const char *nonce,
                      int incremental, const char *const *names,
                      const char *const *versions, const char *const *removed);

/* Flattens and decodes a message from the core. Free with the matching
 * free_unpacked(x, NULL). Fails the test when it does not decode. */
Istio__Mcp__V1alpha1__Resources *th_decode_resources(const mcp_msg *msg);
Istio__Mcp__V1alpha1__RequestResources *th_decode_request(const mcp_msg *msg);

/* Runs a source session: next() at |ts| into a decoded Resources (NULL when
 * nothing is to be sent), freeing the mcp_msg. */
Istio__Mcp__V1alpha1__Resources *th_source_next(mcp_source_session *s,
                                                mcp_tstamp ts);
/* Sends request bytes to the source and checks the return value. */
void th_source_recv(mcp_source_session *s, uint8_t *bytes, size_t len,
                    mcp_tstamp ts, int expect);

/* Index of a resource named |name| in |r|, or -1. */
int th_find(const Istio__Mcp__V1alpha1__Resources *r, const char *name);
int th_find_removed(const Istio__Mcp__V1alpha1__Resources *r, const char *name);

#endif
