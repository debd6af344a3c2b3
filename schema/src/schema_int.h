/* Internals of libmcp-schema, shared between its source files. */
#ifndef MCP_SCHEMA_INT_H
#define MCP_SCHEMA_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mcp/schema.h"
#include <mcp/engine.h>

#define SC_UNUSED(x) ((void)(x))

/* ---- allocation ---------------------------------------------------- */

void sc_mem_init(mcp_mem *dst, const mcp_mem *src);
void *sc_malloc(const mcp_mem *m, size_t n);
void *sc_realloc(const mcp_mem *m, void *p, size_t n);
void sc_free(const mcp_mem *m, void *p);

/* A bump allocator: everything freed at once. */
typedef struct sc_chunk sc_chunk;
typedef struct sc_arena {
  const mcp_mem *mem;
  sc_chunk *head;
} sc_arena;
void *sc_arena_alloc(sc_arena *a, size_t n);
char *sc_arena_strndup(sc_arena *a, const char *s, size_t n);
void sc_arena_free(sc_arena *a);

/* Appends to the engine's growable buffer (mcp_buf, engine.h); 0 or
 * MCP_ERR_NOMEM. Inline: the encoders write a few bytes at a time, and
 * the buffer mostly has room. */
static inline int sc_buf_putc(mcp_buf *b, uint8_t c) {
  if (b->len == b->cap && mcp_buf_reserve(b, 1))
    return MCP_ERR_NOMEM;
  b->p[b->len++] = c;
  return 0;
}

/* The engine's varint writer at the buffer's end (room is there). */
static inline void sc_put_varint(mcp_buf *b, uint64_t v) {
  b->len = (size_t)(mcp_wire_put_varint(b->p + b->len, v) - b->p);
}

static inline int sc_buf_varint(mcp_buf *b, uint64_t v) {
  if (b->cap - b->len < 10 && mcp_buf_reserve(b, 10))
    return MCP_ERR_NOMEM;
  sc_put_varint(b, v);
  return 0;
}

/* A length-delimited field: |key| (number << 3 | 2), the length, the
 * |n| bytes of |p|. */
static inline int sc_buf_field(mcp_buf *b, uint64_t key, const void *p, size_t n) {
  if (n > SIZE_MAX - 20 || (b->cap - b->len < n + 20 && mcp_buf_reserve(b, n + 20)))
    return MCP_ERR_NOMEM;
  sc_put_varint(b, key);
  sc_put_varint(b, n);
  if (n)
    memcpy(b->p + b->len, p, n);
  b->len += n;
  return 0;
}
int sc_buf_printf(mcp_buf *b, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Protobuf wire types, and the one a field of |type| (SC_*) is written
 * with (groups: WT_SGROUP; the encoder refuses them before asking). */
enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_I32 = 5 };
int sc_wire_type(int type);

/* ---- errors -------------------------------------------------------- */

/* Fills |err| (if not NULL): code, line, path, and message "path: what"
 * (just "what" with an empty path). Returns |code|. */
int sc_error(mcp_schema_error *err, int code, unsigned long line,
             const char *path, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* ---- the pool ------------------------------------------------------ */

/* FieldDescriptorProto.Type */
enum {
  SC_DOUBLE = 1, SC_FLOAT = 2, SC_INT64 = 3, SC_UINT64 = 4, SC_INT32 = 5,
  SC_FIXED64 = 6, SC_FIXED32 = 7, SC_BOOL = 8, SC_STRING = 9, SC_GROUP = 10,
  SC_MESSAGE = 11, SC_BYTES = 12, SC_UINT32 = 13, SC_ENUM = 14,
  SC_SFIXED32 = 15, SC_SFIXED64 = 16, SC_SINT32 = 17, SC_SINT64 = 18
};

/* Well-known types with a special JSON form. */
enum {
  SC_WKT_NONE, SC_WKT_ANY, SC_WKT_DURATION, SC_WKT_TIMESTAMP, SC_WKT_STRUCT,
  SC_WKT_VALUE, SC_WKT_LISTVALUE, SC_WKT_FIELDMASK, SC_WKT_WRAPPER
};

typedef struct sc_enum_value {
  const char *name;
  int32_t number;
} sc_enum_value;

typedef struct sc_enum {
  const char *full_name;
  sc_enum_value *values; /* declaration order */
  size_t nvalues;
  int open;              /* proto3: unknown numbers allowed */
  int null_value;        /* google.protobuf.NullValue */
} sc_enum;

struct sc_msg;
typedef struct sc_field {
  const char *name, *json_name;
  uint32_t number;
  int type;     /* SC_* */
  int repeated; /* label repeated */
  int packed;   /* repeated scalar written packed */
  int presence; /* written even at its default value when set */
  int oneof;    /* index of a real (not synthetic) oneof, or -1 */
  const char *type_name; /* message or enum, without the leading dot */
  struct sc_msg *msg;
  sc_enum *enm;
} sc_field;

/* A slot of sc_msg.keys: v as described there, the key's length, and
 * its last word as pool.c's key_hash() reads it (a key of at most 8 bytes
 * is known by these two). */
typedef struct sc_key {
  uint32_t v, len;
  uint64_t last;
} sc_key;

typedef struct sc_msg {
  const char *full_name;
  sc_field *fields; /* sorted by number */
  size_t nfields;
  sc_field **by_name, **by_json; /* sorted by name / json_name */
  /* Open addressing on json_name and name (json_name first: a name that
   * is another field's json_name is not entered): slot value is the
   * field's index + 1, bit 31 set for a name; 0 empty (sc_key). Not the engine's
   * mcp_map: on the encoders' hot path (a lookup per key of a document)
   * that cost 7 % of YAML -> protobuf (a call into libmcp per lookup,
   * 24-byte slots), measured paired in session 16. */
  sc_key *keys;
  size_t keys_mask;
  const char **oneofs;
  size_t noneofs;
  int map_entry; /* fields[0] key (1), fields[1] value (2) */
  int wkt;       /* SC_WKT_* */
} sc_msg;

struct mcp_schema {
  mcp_mem mem;
  unsigned max_depth;
  sc_arena arena;
  sc_msg **msgs;
  size_t nmsgs, msgs_cap;
  sc_enum **enums;
  size_t nenums, enums_cap;
  /* Open addressing on full names; messages and enums in one table:
   * slot value is (index << 1 | is_enum) + 1, 0 meaning empty. */
  size_t *table;
  size_t table_cap;
  struct sc_file *files;
  size_t nfiles, files_cap;
};

const sc_msg *sc_find_msg(const mcp_schema *s, const char *full_name);
const sc_field *sc_field_by_number(const sc_msg *m, uint32_t number);
const sc_field *sc_field_by_name(const sc_msg *m, const char *name);
const sc_field *sc_field_by_json(const sc_msg *m, const char *name);
/* sc_field_by_json(), else sc_field_by_name(), of |len| bytes at |name|
 * (no NUL among them) by one hash lookup. */
const sc_field *sc_field_lookup(const sc_msg *m, const char *name, size_t len);
const sc_enum_value *sc_enum_by_name(const sc_enum *e, const char *name);
const sc_enum_value *sc_enum_by_number(const sc_enum *e, int32_t number);

/* ---- shared codecs ------------------------------------------------- */

/* Base64 (standard and URL-safe alphabets, padding optional) into |out|
 * (at least len*3/4+3 bytes). Returns the length or -1. The engine's
 * mcp_base64_decode(), strict: protobuf JSON's canonical bytes. */
long sc_base64_decode(const char *in, size_t len, uint8_t *out);
int sc_base64_encode(mcp_buf *b, const uint8_t *in, size_t len);

/* Days from 1970-01-01 of a proleptic Gregorian date, and back. */
int64_t sc_days_from_civil(int64_t y, unsigned m, unsigned d);
void sc_civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d);

#define SC_DURATION_MAX_SECONDS INT64_C(315576000000)
#define SC_TIMESTAMP_MIN_SECONDS INT64_C(-62135596800) /* 0001-01-01 */
#define SC_TIMESTAMP_MAX_SECONDS INT64_C(253402300799) /* 9999-12-31T23:59:59 */

/*
 * A google.protobuf.Duration from its text (duration.c): proto3's JSON form
 * "-1.5s" (up to 315576000000 s) or Go's time.ParseDuration form "2h45m",
 * "300ms", "1µs", "0" (up to 2^63-1 ns). 0 with |*secs| and |*nanos| (same
 * sign), or SC_DUR_SYNTAX, SC_DUR_RANGE (proto3's form beyond its range),
 * SC_DUR_GO_RANGE (Go's form beyond its range), SC_DUR_NO_UNIT, or
 * SC_DUR_UNIT with the unknown unit at |*unit_at|, |*unit_len| bytes.
 */
enum { SC_DUR_SYNTAX = 1, SC_DUR_RANGE, SC_DUR_GO_RANGE, SC_DUR_NO_UNIT, SC_DUR_UNIT };
int sc_duration_parse(const char *s, size_t len, int64_t *secs, int32_t *nanos,
                      size_t *unit_at, size_t *unit_len);

/* ".f{1,9}" at |s| (|len| bytes), as Durations and Timestamps end: the
 * nanoseconds in |*nanos| (0 without a '.'); the bytes taken, or -1 when
 * a '.' has no digit or more than nine (duration.c). */
int sc_fraction(const char *s, size_t len, int32_t *nanos);

/* ---- the fast YAML scanner (yaml_fast.c) ----------------------------- */

/* The public events (mcp/schema.h), by shorter names. */
enum { SC_YF_DOC_START = MCP_SCHEMA_YAML_DOC_START, SC_YF_DOC_END = MCP_SCHEMA_YAML_DOC_END,
       SC_YF_SCALAR = MCP_SCHEMA_YAML_SCALAR, SC_YF_SEQ_START = MCP_SCHEMA_YAML_SEQ_START,
       SC_YF_SEQ_END = MCP_SCHEMA_YAML_SEQ_END, SC_YF_MAP_START = MCP_SCHEMA_YAML_MAP_START,
       SC_YF_MAP_END = MCP_SCHEMA_YAML_MAP_END };
enum { SC_YF_PLAIN = MCP_SCHEMA_YAML_PLAIN, SC_YF_SINGLE = MCP_SCHEMA_YAML_SINGLE_QUOTED,
       SC_YF_DOUBLE = MCP_SCHEMA_YAML_DOUBLE_QUOTED };
typedef mcp_schema_yaml_event sc_yf_event;
typedef mcp_schema_yaml_event_fn sc_yf_emit_fn;
#define SC_YF_BAIL MCP_SCHEMA_YAML_UNSURE

/* mcp_schema_yaml_scan() with an initialised |mem| (yaml_fast.c);
 * |*bailed| (when not NULL) 1 when the scanner bailed, 0 when it read the
 * input or the callback (or an allocation) stopped it: a callback's value
 * may be SC_YF_BAIL too. */
int sc_yaml_fast(const mcp_mem *mem, const char *text, size_t len, unsigned max_depth,
                 sc_yf_emit_fn fn, void *ctx, int *bailed);

/* 1 when a plain scalar starting with |c| may be a null, a boolean or a
 * number; else it is a string. */
static inline int sc_yaml_may_resolve(char c) {
  /* "~nNtTfF-+.0123456789" and NUL (the empty scalar), as bits. */
  static const uint64_t lo = 1ull | 1ull << '+' | 1ull << '-' | 1ull << '.' |
                             0x3ffull << '0',
                        hi = 1ull << ('N' - 64) | 1ull << ('T' - 64) |
                             1ull << ('F' - 64) | 1ull << ('n' - 64) |
                             1ull << ('t' - 64) | 1ull << ('f' - 64) |
                             1ull << ('~' - 64);
  unsigned char u = (unsigned char)c;
  return u < 64 ? (int)(lo >> u & 1) : u < 128 ? (int)(hi >> (u - 64) & 1) : 0;
}

/* mcp_schema_yaml_resolve() with its common case inline (yaml_read.c): an
 * untagged quoted scalar, or a plain one whose first byte cannot start a
 * null, a boolean or a number, is a string. */
static inline const char *sc_yaml_resolve(const char *s, const char *tag, int plain,
                                          mcp_schema_kind *kind, int *boolean, double *num) {
  if (!tag && (!plain || !sc_yaml_may_resolve(s[0]))) {
    *kind = MCP_SCHEMA_STRING;
    return NULL;
  }
  return mcp_schema_yaml_resolve(s, tag, plain, kind, boolean, num);
}

/* mcp_schema_yaml_read() with an initialised |mem| and the parser chosen
 * (yaml_read.c): SC_YAML_AUTO as mcp_schema_yaml_read(), SC_YAML_LIBYAML
 * (libyaml alone), SC_YAML_FAST (the scanner alone: SC_YF_BAIL where AUTO
 * would use libyaml, or the negative value |fn| refused an event with). */
int sc_yaml_read(const mcp_mem *mem, const char *text, size_t len, unsigned max_depth,
                 int mode, unsigned flags, mcp_schema_yaml_event_fn fn, void *ctx,
                 mcp_schema_error *err);

/* mcp_schema_parse_yaml() with the parser chosen: SC_YAML_AUTO (the fast
 * scanner, libyaml when it bails), SC_YAML_LIBYAML, SC_YAML_FAST (returns
 * SC_YF_BAIL where AUTO would use libyaml). For the tests and fuzzers that
 * compare the two. */
enum { SC_YAML_AUTO, SC_YAML_LIBYAML, SC_YAML_FAST };
int sc_parse_yaml(const mcp_schema_parse_options *o, const char *text, size_t len,
                  mcp_schema_docs **pdocs, mcp_schema_error *err, int mode);

/* mcp_schema_encode_yaml() with the way chosen: SC_ENCODE_AUTO (straight
 * from the scanner's events, else the long way), SC_ENCODE_DIRECT (returns
 * SC_YF_BAIL where AUTO would take the long way), SC_ENCODE_TREE (the
 * long way: parse, then encode the tree). For the tests and fuzzers that
 * compare them (encode_yaml.c). */
enum { SC_ENCODE_AUTO, SC_ENCODE_DIRECT, SC_ENCODE_TREE };
int sc_encode_yaml(const mcp_schema *s, const char *type_name, const char *text, size_t len,
                   const char *path, unsigned flags, uint8_t **out, size_t *outlen,
                   mcp_schema_error *err, int mode);

/* The first node where two trees differ (kind, boolean, line, text, length,
 * number of kids), as a node of |a|; NULL when they are the same. */
const mcp_schema_value *sc_value_differ(const mcp_schema_value *a, const mcp_schema_value *b);

#endif /* MCP_SCHEMA_INT_H */
