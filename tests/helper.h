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

/* th_put() with a body of |size| bytes of |fill|. */
void th_put_big(mcp_store *st, const char *coll, const char *name,
                const char *version, size_t size, char fill, mcp_tstamp ts);

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

/* ---- added for the store and source suites ---- */

/* Frees a message decoded by th_decode_resources()/th_source_next()
 * (NULL is a no-op). */
void th_resources_free(Istio__Mcp__V1alpha1__Resources *r);

/* The body (Any.value) of resource |i| of |r| compared with |body|: 1 when
 * equal. */
int th_body_is(const Istio__Mcp__V1alpha1__Resources *r, int i,
               const char *body);

/* Formats "<epoch as 16 hex digits>-<gen>", the version the store
 * generates and the system_version_info of a push. Returns |buf|. */
char *th_version(char *buf, size_t n, uint64_t epoch, uint64_t gen);

/* Records events (mcp_event_cb) with copies of their strings. Pass the
 * th_evlog as user_data. Keeps the first TH_EVLOG_MAX; counts the rest in
 * |dropped|. */
#define TH_EVLOG_MAX 256
typedef struct th_event {
  mcp_event_type type;
  char collection[64];
  char nonce[24];
  char version[48];
  int code;
  char message[128];
  size_t nresources, nremoved;
  int incremental;
  mcp_tstamp latency;
} th_event;
typedef struct th_evlog {
  th_event ev[TH_EVLOG_MAX];
  size_t n;
  size_t dropped;
} th_evlog;
void th_evlog_cb(const mcp_event *ev, void *user_data);
/* Number of recorded events of |type|. */
size_t th_evlog_count(const th_evlog *log, mcp_event_type type);
/* The last recorded event of |type|, or NULL. */
const th_event *th_evlog_last(const th_evlog *log, mcp_event_type type);

#endif
