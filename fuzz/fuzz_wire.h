/*
 * The three services' messages seen through one view, decoded and encoded
 * with protobuf-c (independently of the core's hand-written encoder and
 * envelope reader), for the fuzz targets and the seed generator.
 */
#ifndef MCP_FUZZ_WIRE_H
#define MCP_FUZZ_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "mcp/mcp.h"
#include "mcp/v1alpha1/mcp.pb-c.h"

typedef Istio__Mcp__V1alpha1__Resource fz_pbres;

/* A push (Resources, MeshConfigResponse, IncrementalMeshConfigResponse). */
typedef struct fz_push {
  ProtobufCMessage *msg;
  const char *key;     /* collection / type_url / the nonce's part after ':' */
  const char *nonce;
  const char *version; /* system_version_info / version_info */
  int incremental;     /* the flag; 1 for IncrementalMeshConfigResponse */
  size_t nres;
  fz_pbres **res;
  size_t nrem;
  char **rem;
  char *keybuf;
} fz_push;

/* A request (RequestResources, MeshConfigRequest,
 * IncrementalMeshConfigRequest). */
typedef struct fz_req {
  ProtobufCMessage *msg;
  const char *key; /* collection / type_url */
  const char *nonce;
  const char *version_info; /* MeshConfigRequest only, else "" */
  const Google__Rpc__Status *error;
  const Istio__Mcp__V1alpha1__SinkNode *node;
  int incremental;
  size_t ninit;
  const char **init_keys, **init_vals;
} fz_req;

/* 0, or -1 when the bytes do not decode as the service's message. */
int fz_push_decode(mcp_service service, const uint8_t *p, size_t n,
                   fz_push *out);
void fz_push_free(fz_push *x);
int fz_req_decode(mcp_service service, const uint8_t *p, size_t n, fz_req *out);
void fz_req_free(fz_req *x);

/* What a request to encode says. */
typedef struct fz_req_spec {
  const char *key, *nonce, *version_info;
  int incremental;
  int has_error;
  int32_t code;
  const char *message;
  int has_node;
  const char *node_id;
  size_t nannot;
  const mcp_kv *annot;
  size_t ninit;
  const mcp_kv *init;
} fz_req_spec;

/* One resource of a push to encode. */
typedef struct fz_res_spec {
  int has_meta, has_body, has_ct;
  const char *name, *version, *type_url;
  const uint8_t *body;
  size_t body_len;
  size_t nlabels;
  const mcp_kv *labels;
  size_t nannots;
  const mcp_kv *annots;
  int64_t secs;
  int32_t nanos;
} fz_res_spec;

typedef struct fz_push_spec {
  const char *key, *nonce, *version;
  int incremental;
  size_t nres;
  const fz_res_spec *res;
  size_t nrem;
  const char *const *rem;
  /* Bytes appended as one more resources field (may not decode). */
  const uint8_t *raw_res;
  size_t raw_res_len;
  int has_raw_res;
} fz_push_spec;

/* Encoders: malloc'd bytes (free()), length in |*len|. The key of an
 * IncrementalMeshConfigResponse is not encoded (it has no such field). */
uint8_t *fz_req_encode(mcp_service service, const fz_req_spec *r, size_t *len);
uint8_t *fz_push_encode(mcp_service service, const fz_push_spec *p,
                        size_t *len);

/* A message of the core, flattened into malloc'd bytes. */
uint8_t *fz_flatten(const mcp_msg *m, size_t *len);

/* |p|/|len| in fragments of |cut| (> 0) bytes, as a transport may hand a
 * message over: each a malloc'd copy of its own, so that ASan sees a read
 * past one. |*n| gets the count; free with fz_cut_free(). */
mcp_iovec *fz_cut(const uint8_t *p, size_t len, size_t cut, size_t *n);
void fz_cut_free(mcp_iovec *iov, size_t n);

#endif

/* 1 when |s[0..n)| is UTF-8 without NUL bytes, overlong forms, surrogates
 * or values past U+10FFFF (the rule docs/protocol.md gives for strings). */
int fz_utf8_valid(const uint8_t *s, size_t n);

/*
 * The envelope of a push as a strict proto3 reader sees it, written
 * independently of the core's: the last collection (type_url) /
 * system_version_info / nonce fields, the incremental flag, and the number
 * of resources and removed names. Returns 0, or -1 when the bytes are not
 * a well-formed message of that type at the wire level (bad varint, length
 * past the end, a group, field 0, or a wrong wire type for a known field).
 * For IncrementalMeshConfigResponse the key is the nonce's part after its
 * first ':' ("" without one) and incremental is 1.
 */
typedef struct fz_env {
  const uint8_t *key, *nonce, *version;
  size_t key_len, nonce_len, version_len;
  int incremental;
  size_t nres, nrem;
  const uint8_t *res0; /* the first resource's bytes (NULL: none) */
  size_t res0_len;
} fz_env;
int fz_envelope(mcp_service service, const uint8_t *p, size_t n, fz_env *e);
