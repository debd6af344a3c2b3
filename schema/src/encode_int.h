/* The tree encoder's state and the few of its steps the direct encoder
 * (encode_yaml.c) shares, so that a value is converted by one piece of
 * code whichever way its document came. */
#ifndef MCP_SCHEMA_ENCODE_INT_H
#define MCP_SCHEMA_ENCODE_INT_H

#include "schema_int.h"

typedef struct enc {
  const mcp_schema *s;
  mcp_schema_error *err;
  unsigned flags;
  unsigned depth;
  int oom; /* an open_len() failed */
  mcp_buf out;
  char path[MCP_SCHEMA_PATH_MAX];
  size_t plen;
  /* mcp_schema_encode_all(): a mismatch is kept in errs (the first
   * max_errs by line) and encoding goes on with the next field, item or
   * entry; nerrs counts them all. err then points at |cur|. */
  int all;
  mcp_schema_error cur, *errs;
  size_t max_errs, nerrs;
} enc;

/* How sc_enc_scalar() writes a scalar value of field |f|. */
enum {
  SC_ENC_FIELD,  /* as a field: tag and value, nothing at a default value
                    unless the field has presence; a message (Duration,
                    wrapper...) from its scalar form */
  SC_ENC_TAGGED, /* tag and value always (a list item, a map entry's value) */
  SC_ENC_PACKED  /* the value alone (an item of a packed list) */
};

/* Converts the scalar node |v| for field |f| (its type; not a list or a
 * map) and writes it as |how| says. 0, or an error in e->err. */
int sc_enc_scalar(enc *e, const sc_field *f, const mcp_schema_value *v, int how);

/* A message of type |m| from the node |v| with tag |number|: a
 * well-known type's scalar form, for the direct encoder. */
int sc_enc_message(enc *e, uint32_t number, const sc_msg *m, const mcp_schema_value *v);

/* Length-delimited parts: sc_enc_open_len() leaves one byte for the
 * length and returns where the body starts; sc_enc_close_len() writes the
 * length there, moving the body only when the length needs more than one
 * byte (a body of 128 bytes or more). When open_len() cannot allocate, the
 * failure is sticky (e->oom): close_len() and mcp_schema_encode() report
 * it. Inline for the common case; encode.c has the rest. */
size_t sc_enc_open_len_grow(enc *e);
int sc_enc_close_len_long(enc *e, size_t start);

static inline size_t sc_enc_open_len(enc *e) {
  if (e->out.len == e->out.cap)
    return sc_enc_open_len_grow(e);
  e->out.p[e->out.len++] = 0;
  return e->out.len;
}

static inline int sc_enc_close_len(enc *e, size_t start) {
  size_t n = e->out.len - start;
  if (e->oom || n >= 0x80)
    return sc_enc_close_len_long(e, start);
  e->out.p[start - 1] = (uint8_t)n;
  return 0;
}

/* 1 when null is a value for |f| rather than "unset" (Value, NullValue). */
int sc_enc_null_is_value(const sc_field *f);

#endif /* MCP_SCHEMA_ENCODE_INT_H */
