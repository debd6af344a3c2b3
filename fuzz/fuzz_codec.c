/*
 * fuzz_codec: the MCP wire codecs alone (core/mcp/codec_*.c), against
 * protobuf-c as an independent decoder.
 *
 * The first byte picks what the rest is:
 *   0-2  a request of service 0-2, read as the source reads it
 *        (mcp__request_decode, with no limit in the way);
 *   3    a Resources push, read as the sink reads it (mcp__push_parse,
 *        then mcp__resource_read on each resource).
 * Oracles, both directions:
 *   - a canonical request that protobuf-c unpacks, every string in it
 *     UTF-8 without NUL, decodes; a request that both decode has the same
 *     fields (and strings protobuf-c finds UTF-8);
 *   - a canonical push that protobuf-c unpacks parses; one that both read
 *     has the same number of
 *     resources and removed names, and each resource reads with the same
 *     name, version, type URL, body, create time and metadata counts;
 *   - a push cut into fragments (of 1 to 64 bytes, picked by its middle
 *     byte) parses as the one buffer does: same result, and the same
 *     bytes in every span (mcp_sink_session_recv_iov()'s reader);
 *   - on every input, the inline field reader the codecs use
 *     (mcp_wire_field_next) answers exactly as the exported mcp_wire_next
 *     at each step: same result, field, value, payload and position.
 * protobuf-c is laxer than protobuf in places and stricter in others (it
 * refuses a tag padded past five bytes, which protobuf reads), so "protobuf-
 * c reads it, hence we must" is asked of canonical input only (see
 * canonical()), and nothing is concluded from protobuf-c refusing.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../core/mcp/codec.h"
#include "fuzz_util.h"
#include "fuzz_wire.h"
#include "../tests/wire_readers.h"

static mcp_mem mem;

static int str_ok(const char *s) {
  return s && mcp_utf8_valid((const uint8_t *)s, strlen(s), 0);
}

/* |sp| equals protobuf-c's C string |s|. A string with a NUL byte cannot
 * be compared (protobuf-c's ends there); the sink refuses it later as not
 * UTF-8. */
static int span_is(span sp, const char *s) {
  if (sp.n && memchr(sp.p, 0, sp.n)) {
    return 1;
  }
  size_t n = s ? strlen(s) : 0;
  return sp.n == n && (n == 0 || memcmp(sp.p, s, n) == 0);
}

typedef Istio__Mcp__V1alpha1__RequestResources ReqRR;

/* protobuf-c is laxer than protobuf in places (it drops the high bits of
 * a tag over 32 bits, and takes some known fields with the wrong wire
 * type), where we refuse as protobuf does. So "protobuf-c reads it, hence
 * we must" is only asked of canonical input: what protobuf-c writes back
 * byte for byte. "We read it, hence protobuf-c does, and the same" is
 * asked of everything. */
static int canonical(const ProtobufCMessage *m, const uint8_t *in,
                     size_t len) {
  if (protobuf_c_message_get_packed_size(m) != len) {
    return 0;
  }
  /* A field number over 2^29 - 1 even round-trips through protobuf-c. Any
   * five-byte varint whose last byte is above 0x0f may be such a tag. */
  for (size_t i = 0; i + 4 < len; ++i) {
    if ((in[i] & in[i + 1] & in[i + 2] & in[i + 3] & 0x80) && in[i + 4] > 0x0f) {
      return 0;
    }
  }
  uint8_t *buf = malloc(len ? len : 1);
  FZ_CHECK(buf != NULL, "malloc");
  protobuf_c_message_pack(m, buf);
  int same = len == 0 || memcmp(buf, in, len) == 0;
  free(buf);
  return same;
}

/* What protobuf-c says a RequestResources holds, and whether every string
 * of it is UTF-8. */
static int rr_strings_ok(const ReqRR *q) {
  int ok = str_ok(q->collection) && str_ok(q->response_nonce);
  for (size_t i = 0; i < q->n_initial_resource_versions; ++i) {
    ok = ok && str_ok(q->initial_resource_versions[i]->key) &&
         str_ok(q->initial_resource_versions[i]->value);
  }
  if (q->sink_node) {
    ok = ok && str_ok(q->sink_node->id);
    for (size_t i = 0; i < q->sink_node->n_annotations; ++i) {
      ok = ok && str_ok(q->sink_node->annotations[i]->key) &&
           str_ok(q->sink_node->annotations[i]->value);
    }
  }
  if (q->error_detail) {
    ok = ok && str_ok(q->error_detail->message);
  }
  return ok;
}

static void check_rr(const mcp_request *r, const ReqRR *q) {
  FZ_CHECK(strcmp(r->key, q->collection) == 0, "collection differs");
  FZ_CHECK(strcmp(r->nonce, q->response_nonce) == 0, "nonce differs");
  FZ_CHECK(r->incremental == (q->incremental != 0), "incremental differs");
  FZ_CHECK(r->ninitial == q->n_initial_resource_versions,
           "initial versions: %zu, protobuf-c %zu", r->ninitial,
           q->n_initial_resource_versions);
  for (size_t i = 0; i < r->ninitial; ++i) {
    FZ_CHECK(strcmp(r->initial[i].key, q->initial_resource_versions[i]->key) == 0 &&
                 strcmp(r->initial[i].value,
                        q->initial_resource_versions[i]->value) == 0,
             "initial version %zu differs", i);
  }
  FZ_CHECK(!r->node == !q->sink_node, "sink node presence differs");
  if (r->node) {
    FZ_CHECK(strcmp(r->node->id, q->sink_node->id) == 0, "node id differs");
    FZ_CHECK(r->node->n_annotations == q->sink_node->n_annotations,
             "node annotations differ");
    for (size_t i = 0; i < r->node->n_annotations; ++i) {
      FZ_CHECK(strcmp(r->node->annotations[i]->key,
                      q->sink_node->annotations[i]->key) == 0 &&
                   strcmp(r->node->annotations[i]->value,
                          q->sink_node->annotations[i]->value) == 0,
               "node annotation %zu differs", i);
    }
  }
  FZ_CHECK(!r->error == !q->error_detail, "error presence differs");
  if (r->error) {
    FZ_CHECK(r->error->code == q->error_detail->code &&
                 strcmp(r->error->message, q->error_detail->message) == 0,
             "error differs");
  }
}

static void request(mcp_service service, const uint8_t *in, size_t len) {
  const mcp_request_limits lim = {service,    UINT32_MAX, UINT32_MAX,
                                  UINT32_MAX, UINT32_MAX, UINT32_MAX,
                                  UINT32_MAX, UINT32_MAX, UINT32_MAX};
  mcp_request_buf d;
  memset(&d, 0, offsetof(mcp_request_buf, stack));
  mcp_pballoc_init(&d.pa, &mem);
  mcp_request r;
  int rv = mcp__request_decode(&lim, &mem, in, len, &d, &r);
  FZ_CHECK(rv == 0 || rv == MCP_ERR_MALFORMED, "request: %s",
           mcp_strerror(rv));
  if (service == MCP_SERVICE_RESOURCE) {
    ReqRR *q = istio__mcp__v1alpha1__request_resources__unpack(NULL, len, in);
    FZ_CHECK(rv != 0 || !q || rr_strings_ok(q),
             "request decoded, protobuf-c finds a string not UTF-8");
    FZ_CHECK(rv == 0 || !q || !rr_strings_ok(q) ||
                 !canonical(&q->base, in, len),
             "canonical request refused: %s", mcp_strerror(rv));
    if (rv == 0 && q) {
      check_rr(&r, q);
    }
    if (q) {
      istio__mcp__v1alpha1__request_resources__free_unpacked(q, NULL);
    }
  }
  mcp__request_buf_free(&d, &mem);
}

typedef Istio__Mcp__V1alpha1__Resources Push;

static int span_eq(span a, span b) {
  return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}

/* The same bytes in fragments of |cut| bytes read as one buffer |one|
 * (rv |rv1|). */
static void push_cut(const uint8_t *in, size_t len, size_t cut,
                     const envelope *one, int rv1) {
  size_t n;
  mcp_iovec *iov = fz_cut(in, len, cut, &n);
  envelope env;
  int rv = mcp__push_parse(&mem, MCP_SERVICE_RESOURCE, iov, n, &env);
  FZ_CHECK(rv == rv1, "push in fragments of %zu: %s, one buffer: %s", cut,
           mcp_strerror(rv), mcp_strerror(rv1));
  if (rv == 0) {
    int same = env.nres == one->nres && env.nrem == one->nrem &&
               env.incremental == one->incremental &&
               span_eq(env.sysver, one->sysver) &&
               span_eq(env.collection, one->collection) &&
               span_eq(env.nonce, one->nonce);
    for (size_t i = 0; same && i < env.nres; ++i) {
      same = span_eq(env.res[i], one->res[i]);
    }
    for (size_t i = 0; same && i < env.nrem; ++i) {
      same = span_eq(env.rem[i], one->rem[i]);
    }
    FZ_CHECK(same, "push in fragments of %zu: the envelope differs", cut);
    mcp_mem_free(&mem, env.res);
    mcp_mem_free(&mem, env.rem);
    mcp_mem_free(&mem, env.scratch);
  }
  fz_cut_free(iov, n);
}

static void push(const uint8_t *in, size_t len) {
  envelope env;
  mcp_iovec one = {in, len};
  int rv = mcp__push_parse(&mem, MCP_SERVICE_RESOURCE, &one, 1, &env);
  if (len > 1) {
    push_cut(in, len, 1 + in[len / 2] % 64, &env, rv);
  }
  Push *q = istio__mcp__v1alpha1__resources__unpack(NULL, len, in);
  int canon = q && canonical(&q->base, in, len);
  if (rv == 0) {
    FZ_CHECK(!q || (env.nres == q->n_resources &&
                    env.nrem == q->n_removed_resources),
             "push: %zu resources and %zu removed, protobuf-c %zu and %zu",
             env.nres, env.nrem, q->n_resources, q->n_removed_resources);
    FZ_CHECK(!q || (span_is(env.sysver, q->system_version_info) &&
                    span_is(env.collection, q->collection) &&
                    span_is(env.nonce, q->nonce) &&
                    env.incremental == (q->incremental != 0)),
             "push: envelope differs");
    for (size_t i = 0; i < env.nres; ++i) {
      rview r;
      memset(&r, 0, sizeof(r));
      int rr = mcp__resource_read(env.res[i], &r, NULL);
      FZ_CHECK(rr == 0 || rr == MCP_ERR_MALFORMED, "resource: %s",
               mcp_strerror(rr));
      if (rr != 0) {
        FZ_CHECK(!canon, "resource %zu of a canonical push refused", i);
        continue;
      }
      if (!q) {
        continue;
      }
      const Istio__Mcp__V1alpha1__Resource *pr = q->resources[i];
      const Istio__Mcp__V1alpha1__Metadata *md = pr->metadata;
      FZ_CHECK(span_is(r.name, md ? md->name : "") &&
                   span_is(r.version, md ? md->version : ""),
               "resource %zu: name or version differs", i);
      FZ_CHECK(r.nlabels == (md ? md->n_labels : 0) &&
                   r.nannotations == (md ? md->n_annotations : 0),
               "resource %zu: metadata counts differ", i);
      FZ_CHECK(r.has_ct == (md && md->create_time), "create time presence");
      if (r.has_ct) {
        FZ_CHECK(r.ct_seconds == md->create_time->seconds &&
                     r.ct_nanos == md->create_time->nanos,
                 "resource %zu: create time differs", i);
      }
      const Google__Protobuf__Any *body = pr->body;
      FZ_CHECK(span_is(r.type_url, body ? body->type_url : ""),
               "resource %zu: type URL differs", i);
      size_t bl = body ? body->value.len : 0;
      FZ_CHECK(r.body.n == bl &&
                   (bl == 0 || memcmp(r.body.p, body->value.data, bl) == 0),
               "resource %zu: body differs", i);
    }
  } else {
    FZ_CHECK(rv == MCP_ERR_MALFORMED, "push: %s", mcp_strerror(rv));
  }
  FZ_CHECK(!canon || rv == 0, "canonical push refused");
  mcp_mem_free(&mem, env.res);
  mcp_mem_free(&mem, env.rem);
  mcp_mem_free(&mem, env.scratch);
  if (q) {
    istio__mcp__v1alpha1__resources__free_unpacked(q, NULL);
  }
}

/* The inline reader and the exported one, step by step over |in|. */
static void readers(const uint8_t *in, size_t len) {
  size_t at;
  FZ_CHECK(wire_readers_agree(in, len, &at),
           "mcp_wire_field_next and mcp_wire_next differ at offset %zu", at);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) {
    return 0;
  }
  static int ready;
  if (!ready) {
    mcp_mem_init(&mem, NULL);
    ready = 1;
  }
  readers(data + 1, size - 1);
  unsigned sel = data[0] % 4;
  if (sel < 3) {
    request((mcp_service)sel, data + 1, size - 1);
  } else {
    push(data + 1, size - 1);
  }
  return 0;
}
