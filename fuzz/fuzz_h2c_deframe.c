/*
 * fuzz_h2c_deframe: the gRPC message deframer of the h2c transport
 * (transport-h2c/src/deframe.c), which reads what a peer sends on every
 * MCP stream, fed the stream in chunks as DATA frames would cut it, against
 * a reference that reads the whole stream at once:
 *   - the same messages, byte for byte, in order, and the same error (kind
 *     and announced length) after the same number of bytes;
 *   - a message that lies whole in one chunk is returned in place (no copy);
 *   - the buffer of a message spanning chunks never exceeds its announced
 *     length, nor twice what arrived (at least 4 KiB), and nothing is held
 *     once a message is released;
 *   - an error is sticky; every call consumes all input or stops at a
 *     message's end.
 * Each chunk is a separate allocation, so ASan sees any read beyond it.
 * Input: one byte choosing the maximum message size, then chunks, each a
 * length byte and that many bytes (255: the rest of the input).
 */
#include <stdlib.h>
#include <string.h>

#include "deframe.h"
#include "fuzz_util.h"

static const size_t maxes[8] = {0, 1, 4, 16, 100, 4096, 70000, 4u << 20};

/* What the reference found: messages as (offset, length) in the stream. */
typedef struct ref {
  size_t nmsg, cap;
  size_t *off, *len;
  int err;        /* MCP_H2C_DEFRAME_* or 0 */
  size_t err_at;  /* bytes consumed when the error was found */
  uint32_t err_len;
} ref;

static void ref_add(ref *r, size_t off, size_t len) {
  if (r->nmsg == r->cap) {
    r->cap = r->cap ? 2 * r->cap : 16;
    r->off = realloc(r->off, r->cap * sizeof(*r->off));
    r->len = realloc(r->len, r->cap * sizeof(*r->len));
    FZ_CHECK(r->off && r->len, "out of memory");
  }
  r->off[r->nmsg] = off;
  r->len[r->nmsg] = len;
  r->nmsg++;
}

/* gRPC over HTTP/2: Length-Prefixed-Message = Compressed-Flag (1 byte)
 * Message-Length (4 bytes, big endian) Message. */
static void reference(const uint8_t *s, size_t n, size_t max, ref *r) {
  size_t i = 0;
  while (n - i >= 5) {
    uint32_t len = (uint32_t)s[i + 1] << 24 | (uint32_t)s[i + 2] << 16 |
                   (uint32_t)s[i + 3] << 8 | (uint32_t)s[i + 4];
    int err = s[i] == 1 ? MCP_H2C_DEFRAME_COMPRESSED
              : s[i] == 0 ? (len > max ? MCP_H2C_DEFRAME_TOO_LARGE : 0)
              : (s[i] & 1) ? MCP_H2C_DEFRAME_COMPRESSED
                           : MCP_H2C_DEFRAME_FLAGS;
    if (err) {
      r->err = err;
      r->err_at = i + 5;
      r->err_len = len;
      return;
    }
    if (n - i - 5 < len)
      return;
    ref_add(r, i + 5, len);
    i += 5 + len;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_in in = {data, size};
  size_t max = maxes[fz_u8(&in) & 7];

  /* The chunks, and the stream they make. */
  uint8_t *stream = malloc(size + 1);
  size_t slen = 0, nchunks = 0;
  const uint8_t **chunk = malloc((size + 1) * sizeof(*chunk));
  size_t *clen = malloc((size + 1) * sizeof(*clen));
  FZ_CHECK(stream && chunk && clen, "out of memory");
  while (in.n > 0) {
    size_t want = fz_u8(&in), got;
    const uint8_t *p = fz_take(&in, want == 255 ? in.n : want, &got);
    chunk[nchunks] = p;
    clen[nchunks++] = got;
    if (got)
      memcpy(stream + slen, p, got);
    slen += got;
  }

  ref r = {0};
  reference(stream, slen, max, &r);

  mcp_h2c_deframer d;
  mcp_h2c_deframer_init(&d, max);
  size_t consumed = 0, seen = 0;
  int err = 0;
  for (size_t c = 0; c < nchunks && !err; ++c) {
    /* A copy of its own: reading past it is an ASan report. */
    uint8_t *buf = malloc(clen[c] ? clen[c] : 1);
    FZ_CHECK(buf, "out of memory");
    if (clen[c])
      memcpy(buf, chunk[c], clen[c]);
    const uint8_t *p = buf;
    size_t n = clen[c];
    while (n > 0) {
      const uint8_t *m = NULL, *was = p;
      size_t len = 0, wasn = n;
      int rv = mcp_h2c_deframe(&d, &p, &n, &m, &len);
      FZ_CHECK(p >= was && p - was == (ptrdiff_t)(wasn - n),
               "the input pointer and length moved apart");
      consumed += wasn - n;
      if (rv < 0) {
        FZ_CHECK(rv == r.err, "error %d, reference %d (at byte %zu)", rv,
                 r.err, consumed);
        FZ_CHECK(consumed == r.err_at, "error after %zu bytes, reference %zu",
                 consumed, r.err_at);
        if (rv == MCP_H2C_DEFRAME_TOO_LARGE)
          FZ_CHECK(d.msg_len == r.err_len, "announced length %u, reference %u",
                   (unsigned)d.msg_len, (unsigned)r.err_len);
        const uint8_t *p2 = p;
        size_t n2 = n;
        FZ_CHECK(mcp_h2c_deframe(&d, &p2, &n2, &m, &len) == rv && n2 == n,
                 "an error is not sticky");
        err = rv;
        break;
      }
      if (rv == 0) {
        FZ_CHECK(n == 0, "0 returned with %zu bytes left", n);
        /* A partial message: bounded by its length and by what arrived. */
        size_t held = mcp_h2c_deframer_held(&d);
        size_t bound = 2 * d.body.len > 4096 ? 2 * d.body.len : 4096;
        FZ_CHECK(held <= d.msg_len || d.hdr_len < 5,
                 "holding %zu bytes of a %u-byte message", held,
                 (unsigned)d.msg_len);
        FZ_CHECK(held <= bound, "holding %zu bytes after %zu arrived", held,
                 d.body.len);
        break;
      }
      FZ_CHECK(rv == 1, "unknown result %d", rv);
      FZ_CHECK(seen < r.nmsg, "a message the reference does not see");
      FZ_CHECK(len == r.len[seen], "message %zu: %zu bytes, reference %zu",
               seen, len, r.len[seen]);
      FZ_CHECK(consumed == r.off[seen] + len,
               "message %zu ends at %zu, reference %zu", seen, consumed,
               r.off[seen] + len);
      FZ_CHECK(len == 0 || memcmp(m, stream + r.off[seen], len) == 0,
               "message %zu differs", seen);
      /* Whole in this call's input: returned in place. */
      if (len > 0 && r.off[seen] >= consumed - (size_t)(p - buf))
        FZ_CHECK(m >= buf && m + len == p, "message %zu was copied", seen);
      seen++;
      mcp_h2c_deframer_release(&d);
      if (d.hdr_len == 0)
        FZ_CHECK(mcp_h2c_deframer_held(&d) == 0,
                 "%zu bytes held between messages",
                 mcp_h2c_deframer_held(&d));
    }
    free(buf);
  }
  if (!err) {
    FZ_CHECK(r.err == 0 || r.err_at > consumed,
             "the reference fails at byte %zu (%d), the deframer did not",
             r.err_at, r.err);
    FZ_CHECK(seen == r.nmsg, "%zu messages, reference %zu", seen, r.nmsg);
  }
  mcp_h2c_deframer_free(&d);
  free(r.off);
  free(r.len);
  free(stream);
  free(chunk);
  free(clen);
  return 0;
}
