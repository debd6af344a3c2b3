/*
 * libmcp-schema: typed resource bodies. Converts YAML/JSON documents to
 * protobuf wire bytes and wire bytes to JSON, following the proto3 JSON
 * mapping, for any message type described by a FileDescriptorSet
 * (protoc --include_imports --descriptor_set_out=F.pb ...).
 *
 * Depends on libc, libprotobuf-c and libyaml; allocation goes through the
 * core's mcp_mem hook; error codes are the core's (mcp_strerror()).
 *
 * Thread safety: an mcp_schema is read-only once loaded: encode/decode
 * calls on one schema may run concurrently; mcp_schema_add_descriptor_set()
 * may not run concurrently with anything else on the same schema.
 *
 * docs/schema.md gives the exact mapping rules and error messages.
 * In this tree's meson build: dependency object mcp_schema_dep (defined in
 * schema/meson.build, which the top-level meson.build includes after core/).
 */
#ifndef MCP_SCHEMA_H
#define MCP_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include <mcp/mcp.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

/*
 * What went wrong with a document, a descriptor set or wire bytes. Every
 * function taking an mcp_schema_error * (which may be NULL) fills it when
 * it fails, and leaves it untouched when it succeeds.
 *
 * message is complete and ready to log, the field path first:
 *   spec.http[0].route[0].weight: expected an integer, got "x"
 * path is the field path alone ("spec.http[0].route[0].weight"; the
 * caller's prefix for the document root, "" without one). line is the
 * 1-based line of the offending node in the document (0 when unknown: wire
 * bytes, descriptor sets, a tree built without lines). The file name is the
 * caller's to add ("FILE:LINE: message").
 */
#define MCP_SCHEMA_PATH_MAX 256
#define MCP_SCHEMA_MESSAGE_MAX 512
typedef struct mcp_schema_error {
  int code; /* MCP_ERR_*: see each function */
  unsigned long line;
  char path[MCP_SCHEMA_PATH_MAX];       /* truncated when longer */
  char message[MCP_SCHEMA_MESSAGE_MAX]; /* truncated when longer */
} mcp_schema_error;

/* ------------------------------------------------------------------ */
/* Documents: a generic value tree with line numbers                   */
/* ------------------------------------------------------------------ */

typedef enum mcp_schema_kind {
  MCP_SCHEMA_NULL,
  MCP_SCHEMA_BOOL,
  MCP_SCHEMA_NUMBER,
  MCP_SCHEMA_STRING,
  MCP_SCHEMA_LIST,
  MCP_SCHEMA_MAP
} mcp_schema_kind;

/*
 * One node of a parsed document. The parsers below build these; a program
 * with its own builder on mcp_schema_yaml_read()'s events (mcp-source's
 * loader) may build them itself:
 * the converter only reads them, and a node may be shared (YAML aliases).
 *
 *  - Scalars (NULL, BOOL, NUMBER, STRING): text/len is the scalar as
 *    written (NUL-terminated; STRING may contain NUL bytes, counted in len).
 *    NUMBER text is a YAML 1.2 core-schema or JSON number: [-+]?digits,
 *    0x.., 0o.., [-+]?(digits[.digits]|.digits)([eE][-+]?digits),
 *    [-+]?.inf (any case form YAML allows), .nan. BOOL sets boolean.
 *    A quoted YAML scalar is a STRING, a plain one resolves by the YAML 1.2
 *    core schema (null ~ true false, numbers as above, anything else STRING).
 *  - LIST: kids[0..n-1] are the items.
 *  - MAP: n pairs, kids[2i] the key (a scalar: its text is the key) and
 *    kids[2i+1] the value, in document order.
 */
typedef struct mcp_schema_value {
  mcp_schema_kind kind;
  int boolean;
  unsigned long line; /* 1-based, 0 when unknown */
  const char *text;
  size_t len;
  const struct mcp_schema_value *const *kids;
  size_t n;
} mcp_schema_value;

/* Limits and allocator of the parsers. Initialise with
 * mcp_schema_parse_options_default(); fields may be appended. */
typedef struct mcp_schema_parse_options {
  const mcp_mem *mem; /* NULL: libc */
  unsigned max_depth; /* nested lists and maps; default 64 */
  size_t max_nodes;   /* per call, YAML aliases expanded; default 1000000 */
  size_t max_bytes;   /* scalar bytes per call, aliases expanded; default 64 MiB */
} mcp_schema_parse_options;

MCP_EXTERN void mcp_schema_parse_options_default(mcp_schema_parse_options *o);

/* Parsed documents, owning their trees. */
typedef struct mcp_schema_docs mcp_schema_docs;

/*
 * Parses |len| bytes of YAML (a stream of one or more documents) or of JSON
 * (exactly one value, RFC 8259, UTF-8) into |*pdocs| (free with
 * mcp_schema_docs_free()). YAML anchors and aliases are expanded (within
 * max_nodes/max_bytes); tags other than the core schema's are refused;
 * duplicate keys are refused. Errors: MCP_ERR_INVALID_ARGUMENT (syntax,
 * with the line), MCP_ERR_LIMIT (depth, nodes, bytes), MCP_ERR_NOMEM.
 * On failure |*pdocs| is untouched. |o| NULL: the defaults.
 */
MCP_EXTERN int mcp_schema_parse_yaml(const mcp_schema_parse_options *o,
                                     const char *text, size_t len,
                                     mcp_schema_docs **pdocs,
                                     mcp_schema_error *err);
MCP_EXTERN int mcp_schema_parse_json(const mcp_schema_parse_options *o,
                                     const char *text, size_t len,
                                     mcp_schema_docs **pdocs,
                                     mcp_schema_error *err);

/* The number of documents (JSON: 1; YAML: 0 for an empty stream) and the
 * root of document |i| (valid until mcp_schema_docs_free()). */
MCP_EXTERN size_t mcp_schema_docs_count(const mcp_schema_docs *docs);
MCP_EXTERN const mcp_schema_value *mcp_schema_docs_root(const mcp_schema_docs *docs,
                                                        size_t i);
MCP_EXTERN void mcp_schema_docs_free(mcp_schema_docs *docs);

/* A map's value for |key| (the last one if repeated), or NULL. */
MCP_EXTERN const mcp_schema_value *mcp_schema_value_get(const mcp_schema_value *map,
                                                        const char *key);

/*
 * The fast YAML scanner under mcp_schema_yaml_read() (which a program
 * with its own YAML builder, mcp-source's loader, should use instead: it
 * falls back to libyaml itself). It reads the common shape of
 * configuration files (block mappings and sequences; plain and quoted
 * scalars and flow collections on one line; comments; "---" between
 * documents; ASCII) and produces the events libyaml produces for them:
 * same order, lines, offsets, text and style. Anything else (anchors,
 * tags, block and multi-line scalars, tabs, CR, non-ASCII, directives, an
 * empty document, any syntax error) stops it with MCP_SCHEMA_YAML_UNSURE:
 * parse that input with libyaml instead, which has the last word.
 */
typedef enum mcp_schema_yaml_event_type {
  MCP_SCHEMA_YAML_DOC_START = 1,
  MCP_SCHEMA_YAML_DOC_END,
  MCP_SCHEMA_YAML_SCALAR,
  MCP_SCHEMA_YAML_SEQ_START,
  MCP_SCHEMA_YAML_SEQ_END,
  MCP_SCHEMA_YAML_MAP_START,
  MCP_SCHEMA_YAML_MAP_END,
  /* Only from mcp_schema_yaml_read() (appended: the scanner never gives
   * them). ALIAS: |anchor| names the anchor. RESTART: drop everything
   * the events so far built; the events of the input start again. */
  MCP_SCHEMA_YAML_ALIAS,
  MCP_SCHEMA_YAML_RESTART
} mcp_schema_yaml_event_type;

typedef enum mcp_schema_yaml_style {
  MCP_SCHEMA_YAML_PLAIN = 1,
  MCP_SCHEMA_YAML_SINGLE_QUOTED,
  MCP_SCHEMA_YAML_DOUBLE_QUOTED,
  /* Block scalars (| and >): only from mcp_schema_yaml_read()'s libyaml. */
  MCP_SCHEMA_YAML_LITERAL,
  MCP_SCHEMA_YAML_FOLDED
} mcp_schema_yaml_style;

/*
 * One event. line: 0-based, as libyaml's start_mark.line (not given for
 * the three ..._END events: whatever it is, do not use it). offset: as
 * libyaml's marks' index (ASCII: bytes) for DOC_START (start_mark: the
 * "---" or the first content) and DOC_END (end_mark: the next "---" or the
 * end of the input); 0 for the others. SCALAR: |len| bytes at |text|
 * (unescaped, not NUL-terminated, valid during the callback only) in
 * |style|; an empty value ("key:") is an empty plain scalar.
 */
typedef struct mcp_schema_yaml_event {
  mcp_schema_yaml_event_type type;
  unsigned long line;
  size_t offset;
  const char *text;
  size_t len;
  mcp_schema_yaml_style style;
  /* Appended for mcp_schema_yaml_read(): SCALAR, SEQ_START, MAP_START:
   * the node's tag and anchor as written (tag resolved by libyaml:
   * "tag:yaml.org,2002:int" for !!int), NULL without; ALIAS: |anchor|.
   * Valid during the callback only. The scanner leaves them NULL. */
  const char *tag;
  const char *anchor;
} mcp_schema_yaml_event;

/* Returns 0 to go on; anything else stops the scan, which returns it. */
typedef int (*mcp_schema_yaml_event_fn)(void *ctx, const mcp_schema_yaml_event *ev);

/* mcp_schema_yaml_scan() did not read the input (not an error). */
#define MCP_SCHEMA_YAML_UNSURE 1

/*
 * Scans |len| bytes at |text|, calling |fn| for each event. Returns 0 (all
 * read), MCP_SCHEMA_YAML_UNSURE (events may have been delivered already:
 * drop what they built; a caller that cannot drops nothing by scanning
 * once with a callback that does nothing first), MCP_ERR_NOMEM, or what
 * |fn| returned. Collections nested |max_depth| deep or deeper are left to
 * libyaml too. |mem| NULL: libc. Reentrant; no state kept between calls.
 */
MCP_EXTERN int mcp_schema_yaml_scan(const mcp_mem *mem, const char *text, size_t len,
                                    unsigned max_depth, mcp_schema_yaml_event_fn fn,
                                    void *ctx);

/*
 * The one YAML reader of the project: every YAML the libraries and
 * programs read (mcp_schema_parse_yaml(), mcp-source's loader) comes
 * through here as events, so that a consumer can build a tree (as
 * mcp_schema_parse_yaml() does) or write its output straight from the
 * events. The events are the fast scanner's (mcp_schema_yaml_scan()) for
 * the files it reads, else libyaml's; libyaml's STREAM events are not
 * given; line and offset as in mcp_schema_yaml_event (libyaml's: offset
 * for DOC_START and DOC_END only, a character index).
 *
 * Flags: MCP_SCHEMA_YAML_PRESCAN: the fast scanner first reads the whole
 * input delivering nothing, so that the events come from one source only
 * and no RESTART is ever given (for a consumer that cannot take back what
 * it did, e.g. reported). Without it the fast scanner's events go out as
 * they come; when it then bails, or |fn| refuses one of them (libyaml may
 * see a syntax error before that point), a RESTART event is given and
 * libyaml reads the input again from the start: its word is the last.
 *
 * Returns 0 (all read), MCP_ERR_MALFORMED (not YAML: |err|, which may be
 * NULL, gets the 1-based line and libyaml's words, "did not find expected
 * key while parsing a block mapping", for the caller to prefix; the line
 * is where libyaml noticed the problem, or, at the end of the input (an
 * unclosed "{" or quote), where the construct began; for a bad encoding,
 * the line of the bad byte), MCP_ERR_NOMEM, or the nonzero value |fn|
 * returned, which stops the reading (return positive values to tell them
 * apart). |err| is untouched unless MCP_ERR_MALFORMED or MCP_ERR_NOMEM.
 * Collections nested |max_depth| deep are read by libyaml (the consumer
 * keeps its own depth limit). |mem| NULL: libc. Reentrant.
 */
#define MCP_SCHEMA_YAML_PRESCAN 0x1u
MCP_EXTERN int mcp_schema_yaml_read(const mcp_mem *mem, const char *text, size_t len,
                                    unsigned max_depth, unsigned flags,
                                    mcp_schema_yaml_event_fn fn, void *ctx,
                                    mcp_schema_error *err);

/*
 * The one YAML 1.2 core-schema scalar resolver. |text| is the scalar
 * (NUL-terminated), |tag| its tag as libyaml gives it (NULL: none; "!"
 * and !!str make a string), |plain| 1 when it was written unquoted.
 * Sets *kind (a quoted scalar is a STRING; a plain one is null ~ true
 * false in their three case forms, a number (see mcp_schema_value), or a
 * STRING), *boolean for a BOOL, and, when |num| is not NULL, *num for a
 * NUMBER: its value as a double (0x.. and 0o.. too, whatever their width;
 * .inf, .nan). Returns NULL, or a static string saying what is wrong:
 * "!!int on a non-integer value" (the same for !!null, !!bool, !!float),
 * "unsupported tag" (any other tag).
 */
MCP_EXTERN const char *mcp_schema_yaml_resolve(const char *text, const char *tag, int plain,
                                               mcp_schema_kind *kind, int *boolean,
                                               double *num);

/* The same for a collection (|kind| MCP_SCHEMA_LIST or MCP_SCHEMA_MAP):
 * NULL for no tag, "!", !!seq on a list, !!map on a map; else
 * "unsupported tag". */
MCP_EXTERN const char *mcp_schema_yaml_collection_tag(const char *tag, mcp_schema_kind kind);

/* ------------------------------------------------------------------ */
/* Schemas                                                             */
/* ------------------------------------------------------------------ */

/* A pool of message and enum types. */
typedef struct mcp_schema mcp_schema;

typedef struct mcp_schema_options {
  const mcp_mem *mem; /* NULL: libc */
  unsigned max_depth; /* nested messages in encode and decode; default 100 */
} mcp_schema_options;

MCP_EXTERN void mcp_schema_options_default(mcp_schema_options *o);

/*
 * Creates an empty pool that already knows the well-known types
 * (google/protobuf/{any,duration,timestamp,wrappers,struct,field_mask,empty}
 * .proto). |o| NULL: the defaults. Errors: MCP_ERR_NOMEM.
 */
MCP_EXTERN int mcp_schema_new(mcp_schema **ps, const mcp_schema_options *o);
MCP_EXTERN void mcp_schema_free(mcp_schema *s);

/*
 * Adds the files of a serialized google.protobuf.FileDescriptorSet. A file
 * already in the pool under the same name is skipped when identical (and
 * always for the well-known types' files); a different one is an error.
 * Every type a field refers to must be in the pool once the set is added
 * (use --include_imports). All or nothing: on failure the pool is
 * unchanged. Errors: MCP_ERR_MALFORMED (not a FileDescriptorSet),
 * MCP_ERR_INVALID_ARGUMENT (conflicting file, duplicate type, unresolved
 * type, groups), MCP_ERR_NOMEM.
 */
MCP_EXTERN int mcp_schema_add_descriptor_set(mcp_schema *s, const uint8_t *data,
                                             size_t len, mcp_schema_error *err);

/* 1 when |full_name| ("istio.networking.v1alpha3.VirtualService", no
 * leading dot) is a message type of the pool, else 0. */
MCP_EXTERN int mcp_schema_has_message(const mcp_schema *s, const char *full_name);

/* The message types of the pool, in the order they were added: count, and
 * the full name of the i-th (valid until mcp_schema_free()). */
MCP_EXTERN size_t mcp_schema_message_count(const mcp_schema *s);
MCP_EXTERN const char *mcp_schema_message_name(const mcp_schema *s, size_t i);

/* ------------------------------------------------------------------ */
/* Type URLs                                                           */
/* ------------------------------------------------------------------ */

#define MCP_SCHEMA_TYPE_URL_PREFIX "type.googleapis.com/"

/* Writes "type.googleapis.com/<full_name>" and a NUL into |buf| when it
 * fits in |len|; returns the length it needs (without the NUL) either way. */
MCP_EXTERN size_t mcp_schema_type_url(const char *full_name, char *buf, size_t len);

/* The type name of a type URL: what follows its last '/' (the whole string
 * without one). Points into |type_url|. */
MCP_EXTERN const char *mcp_schema_type_name(const char *type_url);

/* ------------------------------------------------------------------ */
/* Document -> wire bytes                                              */
/* ------------------------------------------------------------------ */

/* Flags of mcp_schema_encode(). */
#define MCP_SCHEMA_IGNORE_UNKNOWN_FIELDS 0x1u /* skip them, as JSON parsers may */

/*
 * Encodes the document |v| as a message of type |type_name| (full name).
 * The output is deterministic: fields in field-number order, map entries in
 * key order (as protobuf's deterministic serialization), packed repeated
 * scalars, default values of fields without presence omitted.
 *
 * |path| is the field path of |v| in error messages ("spec"; NULL or "":
 * none). On success |*out| is a buffer of |*outlen| bytes allocated with the
 * schema's allocator (free it with mcp_schema_free_bytes(); NULL when the
 * message is empty, *outlen 0). On failure |*out| and |*outlen| are
 * untouched and |err| names the line and the field path.
 *
 * Errors: MCP_ERR_NOT_FOUND (no such message type), MCP_ERR_INVALID_ARGUMENT
 * (the document does not match: unknown field, wrong type, out-of-range
 * number, unknown enum name, two members of a oneof, bad base64, bad
 * Duration/Timestamp/FieldMask, Any of an unknown type...), MCP_ERR_LIMIT
 * (nesting beyond max_depth), MCP_ERR_NOMEM.
 */
MCP_EXTERN int mcp_schema_encode(const mcp_schema *s, const char *type_name,
                                 const mcp_schema_value *v, const char *path,
                                 unsigned flags, uint8_t **out, size_t *outlen,
                                 mcp_schema_error *err);

/*
 * The same, reporting every mismatch of the document rather than the first
 * (a DestinationRule with three bad durations: three errors at once).
 * Encoding goes on after a mismatch with the next field, list item or map
 * entry; the errors of one node are still one error (a field that is not
 * an object reports that, not what is inside it).
 *
 * |errs| (an array of |max_errs|, may be NULL with 0) receives the first
 * |max_errs| errors in line order (document order within a line), each
 * as mcp_schema_encode() would report it; |*nerrs| (may be NULL) is the
 * number found, which may exceed |max_errs| ("... and N more": see
 * MCP_SCHEMA_ERRORS_SHOWN). On success *nerrs is 0 and |errs| untouched.
 *
 * Errors: MCP_ERR_INVALID_ARGUMENT (the document does not match: *nerrs
 * >= 1; or bad arguments: *nerrs 1), MCP_ERR_NOT_FOUND, MCP_ERR_LIMIT,
 * MCP_ERR_NOMEM: these three stop the encoding; *nerrs is 1 and errs[0]
 * says what (mismatches found before are dropped). On failure |*out| and
 * |*outlen| are untouched.
 */
MCP_EXTERN int mcp_schema_encode_all(const mcp_schema *s, const char *type_name,
                                     const mcp_schema_value *v, const char *path,
                                     unsigned flags, uint8_t **out, size_t *outlen,
                                     mcp_schema_error *errs, size_t max_errs,
                                     size_t *nerrs);

/*
 * YAML text straight to wire bytes: |len| bytes at |text| hold one YAML
 * document (or none: the empty message), encoded as a message of type
 * |type_name|. The result is what mcp_schema_parse_yaml() (default limits,
 * the schema's allocator) and then mcp_schema_encode() of the document's
 * root give: the same bytes, or the same error with the same line and
 * path; more than one document is MCP_ERR_INVALID_ARGUMENT. The common
 * shape of a configuration file is encoded from the fast scanner's events
 * with no tree in between, about twice as fast; anything else (a rare YAML
 * construct, Struct and Any fields, any mismatch) takes the long way,
 * which has the last word. Output and ownership as mcp_schema_encode().
 * The direct way keeps its state (about 8 KiB) on the caller's stack.
 */
MCP_EXTERN int mcp_schema_encode_yaml(const mcp_schema *s, const char *type_name,
                                      const char *text, size_t len, const char *path,
                                      unsigned flags, uint8_t **out, size_t *outlen,
                                      mcp_schema_error *err);

/*
 * The same for a value within a document, event by event, for a program
 * with its own reader of the document around it (mcp-source's loader
 * encodes each `spec` this way while it reads the rest). Reusable: its
 * buffers stay between values. Ownership: the encoder is the caller's
 * (mcp_schema_yaml_encoder_free()); it must not outlive the schema.
 *
 * begin(): the events that follow are one value of type |type_name|, a
 * mapping, from its MAP_START to its MAP_END. 0, MCP_ERR_NOT_FOUND (no
 * such type), MCP_ERR_INVALID_ARGUMENT, MCP_ERR_NOMEM.
 * event(): 0, or MCP_SCHEMA_YAML_UNSURE once the encoder has given up on
 * this value (the events that follow are ignored): encode it the long way
 * (a tree, then mcp_schema_encode()), which also says what is wrong with it,
 * if anything. It gives up on what mcp_schema_encode_yaml() leaves to the
 * long way, and on tags, anchors and aliases. Not after finish().
 * finish(): after the value's last event: 0 with |*out| and |*outlen| the
 * bytes (the encoder's buffer: valid until its next begin() or free; a
 * value with no field is 0 bytes), or MCP_SCHEMA_YAML_UNSURE.
 */
typedef struct mcp_schema_yaml_encoder mcp_schema_yaml_encoder;
MCP_EXTERN int mcp_schema_yaml_encoder_new(const mcp_schema *s, mcp_schema_yaml_encoder **px);
MCP_EXTERN void mcp_schema_yaml_encoder_free(mcp_schema_yaml_encoder *x);
MCP_EXTERN int mcp_schema_yaml_encoder_begin(mcp_schema_yaml_encoder *x, const char *type_name);
MCP_EXTERN int mcp_schema_yaml_encoder_event(mcp_schema_yaml_encoder *x,
                                             const mcp_schema_yaml_event *ev);
MCP_EXTERN int mcp_schema_yaml_encoder_finish(mcp_schema_yaml_encoder *x, const uint8_t **out,
                                              size_t *outlen);

/* How many errors of one document the project's programs show before
 * "... and N more" (mcp-source, mcp-schema-conv). */
#define MCP_SCHEMA_ERRORS_SHOWN 20

MCP_EXTERN void mcp_schema_free_bytes(const mcp_schema *s, void *p);

/* ------------------------------------------------------------------ */
/* Wire bytes -> JSON                                                  */
/* ------------------------------------------------------------------ */

/* Flags of mcp_schema_to_json(). */
#define MCP_SCHEMA_JSON_PRETTY 0x1u      /* two-space indentation, newlines */
#define MCP_SCHEMA_JSON_PROTO_NAMES 0x2u /* field names as in the .proto */
#define MCP_SCHEMA_JSON_UNKNOWN_ERROR 0x4u /* unknown fields: an error, not skipped */
/*
 * google.protobuf.Value written for a program that shows bodies rather than
 * reads them back (mcp-sink's mirror): NaN and the infinities as the strings
 * "NaN", "Infinity", "-Infinity"; a Value with no kind set as null; a whole
 * number within +-2^53 in integer form ("3", "0" for -0), any other number
 * with a '.' or an exponent ("18014398509481984.0"); the keys of a Struct in
 * the order they first appear on the wire (the last value of a repeated key
 * wins). Without the flag those NaNs, infinities and kind-less Values are
 * MCP_ERR_MALFORMED, as protobuf's JSON printers have them.
 */
#define MCP_SCHEMA_JSON_LOOSE_VALUES 0x8u

/*
 * Writes the proto3 JSON of the |len| bytes at |wire|, a message of type
 * |type_name|: lowerCamelCase (json_name) keys, enums by name (by number
 * when the value has no name), 64-bit integers as strings, bytes in base64,
 * well-known types in their special forms, fields at their default value
 * omitted, fields in field-number order. On success |*json| is a
 * NUL-terminated string of |*json_len| bytes allocated with the schema's
 * allocator (free it with mcp_schema_free_bytes()).
 *
 * Errors: MCP_ERR_NOT_FOUND (no such message type), MCP_ERR_MALFORMED (not
 * a valid encoding of that type: truncated, wrong wire type for a known
 * field, invalid UTF-8 in a string, an Any of an unknown type, a Duration
 * or Timestamp out of range...), MCP_ERR_LIMIT (nesting), MCP_ERR_NOMEM.
 */
MCP_EXTERN int mcp_schema_to_json(const mcp_schema *s, const char *type_name,
                                  const uint8_t *wire, size_t len,
                                  unsigned flags, char **json, size_t *json_len,
                                  mcp_schema_error *err);

/* Longest mcp_schema_timestamp_text(), with its NUL:
 * "9999-12-31T23:59:59.999999999Z". */
#define MCP_SCHEMA_TIMESTAMP_TEXT_MAX 31

/*
 * Writes |seconds|.|nanos| after the epoch as a google.protobuf.Timestamp's
 * JSON text (RFC 3339 in UTC, "2024-01-02T03:04:05Z", the fraction in 3, 6
 * or 9 digits as needed; no quotes) and a NUL into |buf|. Returns the
 * length, MCP_ERR_INVALID_ARGUMENT (outside 0001-01-01T00:00:00Z ..
 * 9999-12-31T23:59:59.999999999Z, nanos outside 0..999999999) or
 * MCP_ERR_LIMIT (|len| too small: MCP_SCHEMA_TIMESTAMP_TEXT_MAX suffices).
 * Needs no schema; reentrant.
 */
MCP_EXTERN int mcp_schema_timestamp_text(int64_t seconds, int32_t nanos, char *buf,
                                         size_t len);

/*
 * |n| bytes at |p| in padded base64 (RFC 4648, as proto3 JSON writes bytes)
 * with a NUL, into |*out| (|*out_len| bytes without the NUL when out_len is
 * not NULL), allocated with |s|'s allocator: free it with
 * mcp_schema_free_bytes(). Errors: MCP_ERR_INVALID_ARGUMENT, MCP_ERR_NOMEM
 * (|*out| untouched).
 */
MCP_EXTERN int mcp_schema_base64(const mcp_schema *s, const uint8_t *p, size_t n,
                                 char **out, size_t *out_len);

#ifdef __cplusplus
}
#endif

#endif /* MCP_SCHEMA_H */
