/*
 * Internal: the MCP wire codecs, kept apart from the state machines
 * (source.c, sink.c). Nothing here is API.
 */
#ifndef MCP_CODEC_H
#define MCP_CODEC_H

#include <string.h>

#include "mcp/engine.h"
#include "mcp/mcp_v1alpha1.h"
#include "mcp/pballoc.h"

#include "mcp/v1alpha1/mcp.pb-c.h"

#include <stddef.h>

/* 1 when the stream asked for something and every collection the store
 * knows had a push (mcp_admit_initial_sent()). */
int mcp__source_initial_sent(const mcp_source_session *s);

/* mcp_collection_status's versions: V2 has V1's fields (the source's
 * strings live elsewhere). */
#define MCP__STATUS_SIZES                                                  \
  ((const size_t[]){0, sizeof(mcp_collection_status),                      \
                    sizeof(mcp_collection_status)})
#define MCP__STATUS_N 3

/* The sink state's allocator, and the engine stream running its session
 * (mcp_stream.c: the newest stream wins), or NULL. */
const mcp_mem *mcp__sink_state_mem(const mcp_sink_state *st);
void *mcp__sink_state_stream(const mcp_sink_state *st);
void mcp__sink_state_set_stream(mcp_sink_state *st, void *stream);
/* mcp_stream.c: a dialed side's streams (mcp_defs.c), telling |rd| of
 * each whole message their session took (mcp_redial_received; kept by
 * pointer: it must outlive the stream). */
int mcp__source_stream_new_counted(mcp_stream **pst,
                                   const mcp_source_options *opts,
                                   mcp_service service, mcp_redial *rd,
                                   mcp_tstamp ts);
int mcp__sink_stream_new_counted(mcp_stream **pst, mcp_sink_state *state,
                                 mcp_redial *rd, mcp_tstamp ts);

/* Field numbers of the push message of each service (Resources,
 * MeshConfigResponse, IncrementalMeshConfigResponse); 0: no such field.
 * The source writes pushes with it, the sink reads them. */
typedef struct mcp_codec {
  uint8_t version, key, resources, removed, nonce, incremental;
} mcp_codec;
extern const mcp_codec mcp__codecs[3];

/* ---- requests, read by the source (codec_request.c) ---- */

/* A request, whichever service carried it. Pointers into the decoded
 * message, valid during mcp_source_session_recv(). */
typedef struct mcp_request {
  const char *key;        /* collection, or type_url (aggregated) */
  const char *collection; /* in the store */
  const char *nonce;
  const Google__Rpc__Status *error;
  const Istio__Mcp__V1alpha1__SinkNode *node;
  const mcp_kv *initial;
  size_t ninitial;
  int incremental;
  int resume; /* an empty-nonce request resumes from |initial| */
} mcp_request;

/* The decoded message of any service, and what mcp_request borrows from. */
typedef struct mcp_request_buf {
  mcp_pballoc pa;
  ProtobufCMessage *msg;
  mcp_kv *initial;
  char *collection; /* mapped from a type_url */
  /* RequestResources, read by hand: strings copied into one arena. */
  Istio__Mcp__V1alpha1__SinkNode node;
  Google__Rpc__Status status;
  char *arena;
  char stack[512]; /* the arena of small requests (ACKs) */
} mcp_request_buf;

/* What a request may hold; breaking one fails the decode (see
 * mcp_source_session_recv() for which error each gives). */
typedef struct mcp_request_limits {
  mcp_service service;
  uint32_t max_initial, max_node_ann, max_name, max_version;
  uint32_t max_node_id, max_node_key, max_node_value, max_node_bytes;
} mcp_request_limits;

/*
 * Decodes one request of |lim->service| into |r| (pointers into |d|,
 * which the caller zeroes up to |stack|, sets up with mcp_pballoc_init()
 * and frees with mcp__request_buf_free() whatever the result). |r->key| is
 * the collection or type URL as received; mapping a type URL to a
 * collection is the caller's. Errors: MALFORMED, PROTOCOL, LIMIT, NOMEM.
 */
int mcp__request_decode(const mcp_request_limits *lim, const mcp_mem *m,
                        const uint8_t *in, size_t len, mcp_request_buf *d,
                        mcp_request *r);
void mcp__request_buf_free(mcp_request_buf *d, const mcp_mem *m);

/* ---- requests, written by the sink (codec_request.c) ---- */

/* One resource the sink holds (a value of its held map). */
typedef struct held {
  const char *version; /* points after the name, in the same block */
  char name[];
} held;

/* What every request of one sink state shares. */
typedef struct mcp_request_out {
  const mcp_mem *mem;
  mcp_service service;
  int incremental;
  const uint8_t *node_enc; /* the SinkNode, encoded once */
  size_t node_enc_len;
} mcp_request_out;

/* The SinkNode's encoded size plus one, or 0 when it breaks a default
 * limit of a source (MCP_DEFAULT_MAX_NODE_*): a node no source takes by
 * default would end every stream. */
size_t mcp__node_size(const mcp_sink_options *o);
/* Encodes the SinkNode once (into *penc, allocated with |m|); each request
 * embeds it. Errors: NOMEM. */
int mcp__node_encode(const mcp_mem *m, const mcp_sink_options *o,
                     uint8_t **penc, size_t *plen);
/* 1 when the requests of |service| carry initial_resource_versions. */
int mcp__request_has_initial(mcp_service service);
/* Encodes one request of |o->service| for |coll| (a collection or type
 * URL): a new request (empty nonce), an ACK (|code| 0) or a NACK. |initial|
 * is a map name -> held listed as initial_resource_versions, or NULL;
 * |version| the version last applied (MeshConfigRequest.version_info).
 * Errors: NOMEM. */
int mcp__request_encode(const mcp_request_out *o, const char *coll,
                        const char *nonce, int code, const char *msg,
                        const mcp_map *initial, const char *version,
                        mcp_msg **pmsg);

/* ---- pushes, written by the source (codec_push.c) ---- */

/* The header fields: version, collection or type URL (always, even
 * empty), nonce, and the incremental flag where the service has one. */
void mcp__push_header(mcp_msg_builder *b, const mcp_codec *cd,
                      const char *version, const char *key, const char *nonce,
                      int incremental);
/* The rest is the engine's: a resource is the store's encoding, shared
 * (mcp_msg_builder_resource() with cd->resources), a removed name a
 * length-delimited field cd->removed (mcp_msg_builder_len_field()). */

/* ---- pushes, read by the sink (codec_push.c) ---- */

/* The envelope of a Resources message, read by hand so that a resource
 * that fails to decode can still be NACKed with the message's nonce. */
typedef struct span {
  const uint8_t *p;
  size_t n;
} span;

typedef struct envelope {
  span sysver, collection, nonce;
  int incremental;
  span *res, *rem;
  size_t nres, nrem;
  uint8_t *scratch; /* the fields that crossed fragments, copied */
  size_t len;       /* the message's bytes */
} envelope;

/* Reads the envelope of a push of |service|, the bytes of |iov| in order,
 * into |env|: its spans point into the fragments or, for a field that
 * crosses from one into the next, into |env->scratch|. The res and rem
 * arrays and the scratch are allocated with |m|, for the caller to free;
 * on an error nothing is left allocated. Errors: MALFORMED, NOMEM. */
int mcp__push_parse(const mcp_mem *m, mcp_service service,
                    const mcp_iovec *iov, size_t niov, envelope *env);

/* mcp_utf8_valid(, 0), with ASCII without NUL (most strings) checked eight
 * bytes at a time first. */
int mcp__utf8_fast(const uint8_t *s, size_t n);
static inline int span_valid(span s) { return mcp__utf8_fast(s.p, s.n); }

/*
 * Reading a Resource by hand:
 *   Resource { Metadata metadata = 1; google.protobuf.Any body = 2; }
 *   Metadata { string name = 1; Timestamp create_time = 2;
 *              string version = 3; map<string, string> labels = 4;
 *              map<string, string> annotations = 5; }
 *   Timestamp { int64 seconds = 1; int32 nanos = 2; }
 *   Any { string type_url = 1; bytes value = 2; }
 * As protobuf (and protobuf-c) say: the last value of a scalar field wins,
 * repeated occurrences of a message field merge (reading them in order
 * does just that), unknown fields are skipped, a known field of the wrong
 * wire type does not decode, a map entry's absent key or value is "".
 *
 * Each resource is read twice: once to check its wire structure and count
 * what it needs (rview), then, once one arena holds all of the push's
 * strings and mcp_kv arrays, to fill its mcp_resource (filler).
 */
typedef struct rview {
  span name, version, type_url, body;
  int has_ct;
  int64_t ct_seconds;
  int32_t ct_nanos;
  size_t nlabels, nannotations;
  size_t bytes; /* arena bytes for its strings, NULs included */
} rview;

typedef struct filler {
  mcp_kv *lab, *ann; /* the next labels' and annotations' slots */
  char *str;         /* the next string byte */
  int utf8_ok;       /* 0 once a label or annotation is not UTF-8 */
} filler;

static inline size_t span_bytes(span s) { return s.n ? s.n + 1 : 0; }

/* A NUL-terminated copy of |s| in the arena ("" when empty). */
static inline const char *fill_str(filler *fl, span s) {
  if (!s.n) {
    return "";
  }
  char *d = fl->str;
  memcpy(d, s.p, s.n);
  d[s.n] = '\0';
  fl->str += s.n + 1;
  return d;
}

/* Reads one Resource into |r| (zeroed by the caller); with |fl|, also
 * fills its labels and annotations. 0 or MCP_ERR_MALFORMED. */
int mcp__resource_read(span res, rview *r, filler *fl);

#endif /* MCP_CODEC_H */
