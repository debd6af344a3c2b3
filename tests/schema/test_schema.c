/*
 * libmcp-schema unit tests: every field kind's bytes, the errors with their
 * field path and line, descriptor sets, the parsers, the decoder, failed
 * allocations. The types are tests/schema/kinds.proto, compiled by protoc
 * at build time (SCHEMA_KINDS_PB names the descriptor set).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "descriptor.pb-c.h"
#include "mcp/schema.h"

static uint8_t *kinds;
static size_t kinds_len;
static mcp_schema *S;

static void load_kinds(void) {
  if (kinds)
    return;
  const char *p = getenv("SCHEMA_KINDS_PB");
  ck_assert_msg(p, "SCHEMA_KINDS_PB is not set");
  FILE *f = fopen(p, "rb");
  ck_assert_msg(f, "cannot open %s", p);
  kinds = malloc(1 << 20);
  kinds_len = fread(kinds, 1, 1 << 20, f);
  fclose(f);
  ck_assert_uint_gt(kinds_len, 0);
}

static void setup(void) {
  load_kinds();
  ck_assert_int_eq(mcp_schema_new(&S, NULL), 0);
  mcp_schema_error e;
  ck_assert_int_eq(mcp_schema_add_descriptor_set(S, kinds, kinds_len, &e), 0);
}

static void teardown(void) {
  mcp_schema_free(S);
  S = NULL;
}

#define T "mcp.schema.test."

/* Encodes the first YAML document of |yaml| as |type|. */
static int enc(const char *type, const char *yaml, const char *path, unsigned flags,
               uint8_t **out, size_t *n, mcp_schema_error *e) {
  mcp_schema_docs *d;
  int rc = mcp_schema_parse_yaml(NULL, yaml, strlen(yaml), &d, e);
  if (rc)
    return rc;
  ck_assert_uint_ge(mcp_schema_docs_count(d), 1);
  rc = mcp_schema_encode(S, type, mcp_schema_docs_root(d, 0), path, flags, out, n, e);
  /* YAML text straight to bytes gives the same result. */
  if (mcp_schema_docs_count(d) == 1) {
    uint8_t *o2 = NULL;
    size_t n2 = 0;
    mcp_schema_error e2;
    int rc2 = mcp_schema_encode_yaml(S, type, yaml, strlen(yaml), path, flags, &o2, &n2, &e2);
    ck_assert_int_eq(rc2, rc);
    if (!rc)
      ck_assert_msg(n2 == *n && (!n2 || !memcmp(o2, *out, n2)), "%s: other bytes", yaml);
    else
      ck_assert_msg(e2.line == e->line && !strcmp(e2.message, e->message), "%s: %s, not %s",
                    yaml, e2.message, e->message);
    mcp_schema_free_bytes(S, o2);
  }
  mcp_schema_docs_free(d);
  return rc;
}

static void hex(const uint8_t *p, size_t n, char *buf) {
  for (size_t i = 0; i < n; i++)
    sprintf(buf + 2 * i, "%02x", p[i]);
  buf[2 * n] = '\0';
}

static void expect_hex(const char *type, const char *yaml, const char *want) {
  uint8_t *out = NULL;
  size_t n = 0;
  mcp_schema_error e;
  int rc = enc(type, yaml, NULL, 0, &out, &n, &e);
  ck_assert_msg(rc == 0, "%s: %s", yaml, e.message);
  char buf[4096];
  ck_assert_uint_lt(n, sizeof buf / 2);
  hex(out, n, buf);
  ck_assert_msg(!strcmp(buf, want), "%s: got %s, want %s", yaml, buf, want);
  mcp_schema_free_bytes(S, out);
}

/* Short decimals take a way without strtod() (encode.c decimal_fast()):
 * every one must give strtod()'s bits, for a double and for a float. */
START_TEST(test_short_decimals_read_as_strtod_reads_them) {
  static const char *const fixed[] = {"0.5", "-0.0", "10.0", "0.1", "0.3", "1.", ".5",
                                      "+2.25", "999999999999999", "0.000000000000001",
                                      "123456789.012345", "-9007199254740.99", "3.14159"};
  uint32_t r = 12345;
  for (size_t i = 0; i < 20000 + sizeof fixed / sizeof *fixed; i++) {
    char num[40], yaml[64];
    if (i < sizeof fixed / sizeof *fixed) {
      snprintf(num, sizeof num, "%s", fixed[i]);
    } else {
      /* 1 to 17 digits (past 15: strtod()), the point anywhere (or nowhere),
       * either sign. */
      r ^= r << 13, r ^= r >> 17, r ^= r << 5;
      size_t nd = 1 + r % 17, pt = (r >> 4) % (nd + 2), k = 0;
      if (r & 0x10000)
        num[k++] = '-';
      for (size_t j = 0; j < nd; j++) {
        if (j == pt)
          num[k++] = '.';
        r ^= r << 13, r ^= r >> 17, r ^= r << 5;
        num[k++] = (char)('0' + r % 10);
      }
      num[k] = '\0';
    }
    /* "-0" is the integer 0 (not -0.0); a value whose bits are all zero
     * is the default, not written. */
    double want = strtod(num, NULL);
    if (want == 0 && !strchr(num, '.'))
      want = 0.0;
    for (int single = 0; single < 2; single++) {
      snprintf(yaml, sizeof yaml, "%s: %s", single ? "fFloat" : "fDouble", num);
      uint8_t *out = NULL;
      size_t n = 0;
      mcp_schema_error e;
      ck_assert_msg(enc(T "Scalars", yaml, NULL, 0, &out, &n, &e) == 0, "%s: %s", yaml,
                    e.message);
      uint8_t bits[8] = {0}, got[8] = {0};
      size_t size = single ? 4 : 8;
      if (single) {
        float w = (float)want;
        memcpy(bits, &w, 4);
      } else {
        memcpy(bits, &want, 8);
      }
      static const uint8_t zero[8];
      size_t len = memcmp(bits, zero, size) ? 1 + size : 0;
      if (n == len && n)
        memcpy(got, out + 1, size);
      ck_assert_msg(n == len && !memcmp(got, n ? bits : zero, size), "%s: other bits (want %a)",
                    yaml, want);
      mcp_schema_free_bytes(S, out);
    }
  }
}
END_TEST

/* Every name of Scalars' fields is found, and no name one byte off (same
 * length, each position, a few bytes) is: pool.c's lookup tells a name of
 * at most 8 bytes by its length and one word, a longer one by its bytes. */
START_TEST(test_field_names_one_byte_off_are_unknown) {
  static const char *const names[] = {
      "f_double", "fDouble",   "f_float",    "fFloat",     "f_int64",   "fInt64",
      "f_uint64", "fUint64",   "f_int32",    "fInt32",     "f_fixed64", "fFixed64",
      "f_fixed32", "fFixed32", "f_bool",     "fBool",      "f_string",  "fString",
      "f_bytes",  "fBytes",    "f_uint32",   "fUint32",    "f_enum",    "fEnum",
      "f_sfixed32", "fSfixed32", "f_sfixed64", "fSfixed64", "f_sint32", "fSint32",
      "f_sint64", "fSint64",   "f_message",  "fMessage"};
  const size_t nn = sizeof names / sizeof *names;
  for (size_t i = 0; i < nn; i++) {
    char name[32], yaml[64];
    size_t len = strlen(names[i]);
    for (size_t at = 0; at < len; at++)
      for (const char *c = "aZ_0"; *c; c++) {
        memcpy(name, names[i], len + 1);
        if (name[at] == *c)
          continue;
        name[at] = *c;
        int known = 0;
        for (size_t j = 0; j < nn; j++)
          known |= !strcmp(name, names[j]);
        if (known)
          continue;
        snprintf(yaml, sizeof yaml, "%s: ~", name);
        uint8_t *out = NULL;
        size_t n = 0;
        mcp_schema_error e;
        ck_assert_msg(enc(T "Scalars", yaml, NULL, 0, &out, &n, &e) == MCP_ERR_INVALID_ARGUMENT &&
                          strstr(e.message, "unknown field"),
                      "%s: found", name);
      }
    snprintf(yaml, sizeof yaml, "%s: ~", names[i]);
    uint8_t *out = NULL;
    size_t n = 0;
    mcp_schema_error e;
    ck_assert_msg(enc(T "Scalars", yaml, NULL, 0, &out, &n, &e) == 0, "%s: %s", names[i],
                  e.message);
    mcp_schema_free_bytes(S, out);
  }
}
END_TEST

/* ---- every field kind ------------------------------------------------ */

START_TEST(test_scalar_kinds_encode_as_protobuf_does) {
  expect_hex(T "Scalars", "fInt32: -1", "28ffffffffffffffffff01");
  expect_hex(T "Scalars", "fInt32: 2147483647", "28ffffffff07");
  expect_hex(T "Scalars", "fInt32: '12'", "280c");
  expect_hex(T "Scalars", "fInt32: 1.0", "2801");
  expect_hex(T "Scalars", "fInt32: 1e2", "2864");
  expect_hex(T "Scalars", "fInt32: 0x10", "2810");
  expect_hex(T "Scalars", "fInt32: 0o17", "280f");
  expect_hex(T "Scalars", "fSint32: -1", "880101");
  expect_hex(T "Scalars", "fSint64: '-9223372036854775808'", "9001ffffffffffffffffff01");
  expect_hex(T "Scalars", "fInt64: '-2'", "18feffffffffffffffff01");
  expect_hex(T "Scalars", "fUint64: 18446744073709551615", "20ffffffffffffffffff01");
  expect_hex(T "Scalars", "fUint32: 4294967295", "68ffffffff0f");
  expect_hex(T "Scalars", "fFixed32: 1", "3d01000000");
  expect_hex(T "Scalars", "fFixed64: '1'", "310100000000000000");
  expect_hex(T "Scalars", "fSfixed32: -2", "7dfeffffff");
  expect_hex(T "Scalars", "fSfixed64: -2", "8101feffffffffffffff");
  expect_hex(T "Scalars", "fDouble: 1.5", "09000000000000f83f");
  expect_hex(T "Scalars", "fDouble: -0.0", "090000000000000080");
  expect_hex(T "Scalars", "fDouble: -0", ""); /* the integer 0 */
  expect_hex(T "Scalars", "fDouble: .inf", "09000000000000f07f");
  expect_hex(T "Scalars", "fDouble: -Infinity", "09000000000000f0ff");
  expect_hex(T "Scalars", "fFloat: 1.5", "150000c03f");
  expect_hex(T "Scalars", "fBool: true", "4001");
  expect_hex(T "Scalars", "fString: \"\\u00e9\"", "4a02c3a9");
  expect_hex(T "Scalars", "fBytes: AP8=", "620200ff");
  expect_hex(T "Scalars", "fBytes: _w", "6201ff");
  expect_hex(T "Scalars", "fEnum: BLUE", "70fdffffffffffffffff01");
  expect_hex(T "Scalars", "fEnum: 2", "7002");
  expect_hex(T "Scalars", "fEnum: 9", "7009"); /* proto3 enums are open */
  expect_hex(T "Scalars", "fMessage: {}", "9a0100");
  expect_hex(T "Scalars", "fMessage: {name: a, child: {n: 1}}", "9a01070a01611a021001");
}
END_TEST

START_TEST(test_defaults_are_omitted_unless_the_field_has_presence) {
  expect_hex(T "Scalars", "{fInt32: 0, fString: '', fBool: false, fEnum: COLOR_UNSPECIFIED, fBytes: ''}",
             "");
  expect_hex(T "Scalars", "fInt32: null", "");
  expect_hex(T "Scalars", "null", "");
  expect_hex(T "Oneofs", "oInt32: 0", "1000");
  expect_hex(T "Oneofs", "oString: ''", "0a00");
  expect_hex(T "Oneofs", "oNull: null", "2800");
  expect_hex(T "Oneofs", "optInt32: 0", "3000");
  expect_hex(T "Oneofs", "{oString: x, oInt32: null}", "0a0178");
}
END_TEST

START_TEST(test_fields_are_written_in_number_order) {
  expect_hex(T "Scalars", "{fString: x, fInt32: 1, f_double: 0.5}",
             "09000000000000e03f28014a0178");
}
END_TEST

START_TEST(test_repeated_scalars_are_packed_unless_told_not_to) {
  expect_hex(T "Repeated", "rInt32: [1, 2, 300]", "2a040102ac02");
  expect_hex(T "Repeated", "rUnpacked: [1, 2]", "a00101a00102");
  expect_hex(T "Repeated", "rString: [a, '']", "4a01614a00");
  expect_hex(T "Repeated", "rMessage: [{}, {n: 1}]", "9a01009a01021001");
  expect_hex(T "Repeated", "rInt32: []", "");
  expect_hex(T "Repeated", "rDouble: [0]", "0a080000000000000000");
}
END_TEST

START_TEST(test_map_entries_are_sorted_by_key_with_key_and_value) {
  expect_hex(T "Maps", "mInt32: {'5': 1, '-1': 2, '0': 0}",
             "120d08ffffffffffffffffff011002120408001000120408051001");
  expect_hex(T "Maps", "mString: {b: '', a: x}", "0a060a01611201780a050a01621200");
  expect_hex(T "Maps", "mBool: {'true': {}, 'false': {n: 1}}", "62060800120210016204080112" "00");
  expect_hex(T "Maps", "mValue: {a: null}", "72070a0161120208" "00");
}
END_TEST

START_TEST(test_names_json_and_original_both_accepted) {
  expect_hex(T "Names", "snake_case_name: 1", "0801");
  expect_hex(T "Names", "snakeCaseName: 1", "0801");
  expect_hex(T "Names", "renamed: 2", "1002");
  expect_hex(T "Names", "custom: 2", "1002");
}
END_TEST

START_TEST(test_well_known_types_use_their_json_forms) {
  expect_hex(T "Wkt", "duration: 1.5s", "12080801108" "0cab5ee01");
  expect_hex(T "Wkt", "duration: -1.5s", "121608ffffffffffffffffff011080b6ca91feffffffff01");
  expect_hex(T "Wkt", "timestamp: '1970-01-01T00:00:01.000000001Z'", "1a0408011001");
  expect_hex(T "Wkt", "timestamp: '1970-01-01T01:00:00+01:00'", "1a00");
  expect_hex(T "Wkt", "wInt32: 0", "6a00");
  expect_hex(T "Wkt", "wString: s", "8201030a0173");
  expect_hex(T "Wkt", "value: null", "2a020800");
  expect_hex(T "Wkt", "value: [true]", "2a0632040a022001");
  expect_hex(T "Wkt", "struct: {a: x}", "220a0a080a016112031a0178");
  expect_hex(T "Wkt", "mask: 'aB.c,d'", "3a0a0a05615f622e630a0164");
  expect_hex(T "Wkt", "any: {}", "0a00");
  /* null is NullValue's value, in a list too */
  expect_hex(T "Wkt", "nulls: [null, NULL_VALUE]", "b201020000");
  expect_hex(T "Wkt", "any: {'@type': type.googleapis.com/mcp.schema.test.Inner, n: 1}",
             "0a2f0a29747970652e676f6f676c65617069732e636f6d2f6d63702e736368656d612e7465"
             "73742e496e6e657212021001");
}
END_TEST

/* ---- errors: message, path and line --------------------------------- */

typedef struct bad {
  const char *type, *yaml;
  int code;
  unsigned long line;
  const char *message;
} bad;

static const bad bads[] = {
    {T "Scalars", "fInt32: x", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fInt32: expected an integer, got \"x\""},
    {T "Scalars", "\n\nfInt32: 2147483648", MCP_ERR_INVALID_ARGUMENT, 3,
     "spec.fInt32: integer 2147483648 out of range for int32"},
    {T "Scalars", "fInt32: -2147483649", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fInt32: integer -2147483649 out of range for int32"},
    {T "Scalars", "fUint64: -1", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fUint64: integer -1 out of range for uint64"},
    {T "Scalars", "fUint64: 18446744073709551616", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fUint64: integer 18446744073709551616 out of range for uint64"},
    {T "Scalars", "fInt32: 1.5", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fInt32: expected an integer, got 1.5"},
    {T "Scalars", "fInt32: .inf", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fInt32: expected an integer, got .inf"},
    {T "Scalars", "fFloat: 1e39", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fFloat: number 1e39 out of range for float"},
    {T "Scalars", "fDouble: 1e999", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fDouble: number 1e999 out of range for double"},
    {T "Scalars", "fDouble: nan", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fDouble: expected a number, got \"nan\""},
    {T "Scalars", "fBool: 1", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fBool: expected true or false, got 1"},
    {T "Scalars", "fString: [a]", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fString: expected a string, got a list"},
    {T "Scalars", "fBytes: 'a'", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fBytes: expected a base64 string, got \"a\""},
    {T "Scalars", "fEnum: PURPLE", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fEnum: unknown value \"PURPLE\" of enum mcp.schema.test.Color"},
    {T "Scalars", "fEnum: 2147483648", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fEnum: integer 2147483648 out of range for int32"},
    {T "Scalars", "fMessage:\n  child:\n    nn: 1", MCP_ERR_INVALID_ARGUMENT, 3,
     "spec.fMessage.child.nn: unknown field (mcp.schema.test.Inner has no field \"nn\")"},
    {T "Scalars", "fMessage: x", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fMessage: expected an object, got \"x\""},
    /* Near misses of field names (pool.c's lookup knows a name of at most
     * 8 bytes by its length and one word; longer ones by their bytes). */
    {T "Scalars", "fInt33: 1", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fInt33: unknown field (mcp.schema.test.Scalars has no field \"fInt33\")"},
    {T "Scalars", "fJnt32: 1", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fJnt32: unknown field (mcp.schema.test.Scalars has no field \"fJnt32\")"},
    {T "Scalars", "fInt3: 1", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fInt3: unknown field (mcp.schema.test.Scalars has no field \"fInt3\")"},
    {T "Scalars", "fSfixed63: 1", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fSfixed63: unknown field (mcp.schema.test.Scalars has no field \"fSfixed63\")"},
    {T "Scalars", "fSfiyed64: 1", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.fSfiyed64: unknown field (mcp.schema.test.Scalars has no field \"fSfiyed64\")"},
    {T "Inner", "nbme: x", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.nbme: unknown field (mcp.schema.test.Inner has no field \"nbme\")"},
    {T "Inner", "m: x", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.m: unknown field (mcp.schema.test.Inner has no field \"m\")"},
    {T "Scalars", "fInt32: 1\nf_int32: 2", MCP_ERR_INVALID_ARGUMENT, 2,
     "spec.f_int32: field set twice (as \"fInt32\" and \"f_int32\")"},
    {T "Scalars", "[1]", MCP_ERR_INVALID_ARGUMENT, 1, "spec: expected an object, got a list"},
    {T "Repeated", "rInt32: [1,\n  x]", MCP_ERR_INVALID_ARGUMENT, 2,
     "spec.rInt32[1]: expected an integer, got \"x\""},
    {T "Repeated", "rInt32: [null]", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.rInt32[0]: null is not allowed in a list"},
    {T "Repeated", "rMessage: {}", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.rMessage: expected a list, got an object"},
    {T "Repeated", "rMessage: [{n: x}]", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.rMessage[0].n: expected an integer, got \"x\""},
    {T "Maps", "mInt32: {'1': 1, '01': 2}", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.mInt32[01]: duplicate map key"},
    {T "Maps", "mInt32: {a: 1}", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.mInt32[a]: expected an integer, got \"a\""},
    {T "Maps", "mUint32: {'1': x}", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.mUint32[1]: expected true or false, got \"x\""},
    {T "Maps", "mMessage: {k: {n: y}}", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.mMessage[k].n: expected an integer, got \"y\""},
    {T "Maps", "mString: [a]", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.mString: expected an object, got a list"},
    {T "Oneofs", "oString: x\noMessage: {}", MCP_ERR_INVALID_ARGUMENT, 2,
     "spec.oMessage: \"oString\" and \"oMessage\" are both members of oneof choice"},
    {T "Oneofs", "oString: x\noNull: null", MCP_ERR_INVALID_ARGUMENT, 2,
     "spec.oNull: \"oString\" and \"oNull\" are both members of oneof choice"},
    {T "Wkt", "duration: '1.5'", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.duration: duration 1.5 has a number without a unit (ns, us, ms, s, m, h)"},
    {T "Wkt", "duration: 1.5", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.duration: expected a duration such as \"1.5s\" or \"300ms\", got 1.5"},
    {T "Wkt", "duration: 0", MCP_ERR_INVALID_ARGUMENT, 1, /* a number: Go's jsonpb too */
     "spec.duration: expected a duration such as \"1.5s\" or \"300ms\", got 0"},
    {T "Wkt", "duration: 1h 30m", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.duration: unknown unit \"h \" in duration 1h 30m (ns, us, ms, s, m, h)"},
    {T "Wkt", "duration: 5sec", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.duration: unknown unit \"sec\" in duration 5sec (ns, us, ms, s, m, h)"},
    {T "Wkt", "duration: 1D", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.duration: unknown unit \"D\" in duration 1D (ns, us, ms, s, m, h)"},
    {T "Wkt", "duration: 1h-5m", MCP_ERR_INVALID_ARGUMENT, 1, /* as Go says it */
     "spec.duration: unknown unit \"h-\" in duration 1h-5m (ns, us, ms, s, m, h)"},
    {T "Wkt", "duration: '--1s'", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.duration: expected a duration such as \"1.5s\" or \"300ms\", got \"--1s\""},
    {T "Wkt", "duration: ''", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.duration: expected a duration such as \"1.5s\" or \"300ms\", got \"\""},
    {T "Wkt", "duration: 2562048h", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.duration: duration 2562048h out of range (at most 2562047h47m16.854775807s in "
     "Go's form; up to 315576000000s in seconds alone)"},
    {T "Wkt", "duration: 315576000001s", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.duration: duration 315576000001s out of range (at most 315576000000s)"},
    /* A fraction of one to nine digits (sc_fraction, shared with Durations,
     * where Go's form then reads "1.s" and ten digits). */
    {T "Wkt", "timestamp: '1970-01-01T00:00:01.0000000001Z'", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.timestamp: expected an RFC 3339 time such as \"2024-01-02T03:04:05Z\", got "
     "\"1970-01-01T00:00:01.0000000001Z\""},
    {T "Wkt", "timestamp: '1970-01-01T00:00:01.Z'", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.timestamp: expected an RFC 3339 time such as \"2024-01-02T03:04:05Z\", got "
     "\"1970-01-01T00:00:01.Z\""},
    {T "Wkt", "timestamp: '2023-02-29T00:00:00Z'", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.timestamp: not a valid date and time: \"2023-02-29T00:00:00Z\""},
    {T "Wkt", "timestamp: '0000-12-31T00:00:00Z'", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.timestamp: not a valid date and time: \"0000-12-31T00:00:00Z\""},
    {T "Wkt", "timestamp: '0001-01-01T00:00:00+00:01'", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.timestamp: time \"0001-01-01T00:00:00+00:01\" out of range (years 0001 to 9999)"},
    {T "Wkt", "any: {'@type': type.googleapis.com/x.Y}", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.any.@type: unknown type \"type.googleapis.com/x.Y\" in an Any (not in the schema)"},
    {T "Wkt", "any:\n  '@type': type.googleapis.com/google.protobuf.Duration\n  value: 1s\n  x: 1",
     MCP_ERR_INVALID_ARGUMENT, 4,
     "spec.any.x: unknown field (an Any of google.protobuf.Duration has only \"@type\" and "
     "\"value\")"},
    {T "Wkt", "any: {'@type': type.googleapis.com/google.protobuf.Duration}",
     MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.any: an Any of google.protobuf.Duration without \"value\""},
    {T "Wkt", "any: {'@type': type.googleapis.com/mcp.schema.test.Inner, n: x}",
     MCP_ERR_INVALID_ARGUMENT, 1, "spec.any.n: expected an integer, got \"x\""},
    {T "Wkt", "mask: a_b", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.mask: field mask path \"a_b\" has a '_' (paths are lowerCamelCase)"},
    {T "Wkt", "value: .nan", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.value: a Value cannot hold .nan"},
    {T "Wkt", "struct: {a: {b: [1, x, {c: .inf}]}}", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.struct.a.b[2].c: a Value cannot hold .inf"},
    {T "Wkt", "wBool: 'true'", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.wBool: expected true or false, got \"true\""},
    {T "Wkt", "empty: {x: 1}", MCP_ERR_INVALID_ARGUMENT, 1,
     "spec.empty.x: unknown field (google.protobuf.Empty has no field \"x\")"},
};

START_TEST(test_bad_document_error_names_path_and_line) {
  const bad *b = &bads[_i];
  uint8_t *out = (uint8_t *)"untouched";
  size_t n = 12345;
  mcp_schema_error e;
  memset(&e, 0, sizeof e);
  int rc = enc(b->type, b->yaml, "spec", 0, &out, &n, &e);
  ck_assert_msg(rc == b->code, "%s: rc %d (%s)", b->yaml, rc, e.message);
  ck_assert_int_eq(e.code, b->code);
  ck_assert_str_eq(e.message, b->message);
  ck_assert_uint_eq(e.line, b->line);
  /* path is the message's prefix */
  ck_assert_int_eq(strncmp(e.message, e.path, strlen(e.path)), 0);
  ck_assert_str_eq((const char *)out, "untouched");
  ck_assert_uint_eq(n, 12345);
  /* Collecting them all finds the same one error. */
  mcp_schema_docs *d;
  ck_assert_int_eq(mcp_schema_parse_yaml(NULL, b->yaml, strlen(b->yaml), &d, &e), 0);
  mcp_schema_error all[4];
  size_t nerr = 99;
  rc = mcp_schema_encode_all(S, b->type, mcp_schema_docs_root(d, 0), "spec", 0, &out, &n, all,
                             4, &nerr);
  mcp_schema_docs_free(d);
  ck_assert_int_eq(rc, b->code);
  ck_assert_uint_eq(nerr, 1);
  ck_assert_str_eq(all[0].message, b->message);
  ck_assert_uint_eq(all[0].line, b->line);
}
END_TEST

/* Go's time.ParseDuration forms (Istio's YAML), read as Go reads them;
 * written back in proto3's canonical form. tests/schema/go_durations.txt
 * has many more, checked against Go itself and by oracle.py. */
START_TEST(test_go_durations_are_read_as_go_reads_them) {
  static const char *const cases[][2] = {
      {"300ms", "0.300s"},  {"1.5h", "5400s"},     {"2h45m", "9900s"},
      {"-1.5s", "-1.500s"}, {"1us", "0.000001s"},  {"1\xc2\xb5s", "0.000001s"},
      {"1\xce\xbcs", "0.000001s"}, {"1ns", "0.000000001s"}, {"'0'", "0s"},
      {"'-0'", "0s"},      {"+5s", "5s"},        {".5s", "0.500s"},
      {"1.1h", "3960s"},   {"0.3333333333h", "1199.999999880s"},
      {"1.0000000001s", "1s"}, /* Go truncates beyond nanoseconds */
      {"-2562047h47m16.854775808s", "-9223372036.854775808s"},
      {"315576000000s", "315576000000s"}, /* proto3's range, beyond Go's */
      {"9223372036854775808ns9223372036854775808ns", "0s"}, /* Go's sum wraps */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char yaml[128], want[128];
    snprintf(yaml, sizeof yaml, "duration: \"%s\"", cases[i][0]);
    if (cases[i][0][0] == '\'')
      snprintf(yaml, sizeof yaml, "duration: %s", cases[i][0]);
    snprintf(want, sizeof want, "{\"duration\":\"%s\"}", cases[i][1]);
    uint8_t *out = NULL;
    size_t n = 0;
    mcp_schema_error e;
    int rc = enc(T "Wkt", yaml, NULL, 0, &out, &n, &e);
    ck_assert_msg(rc == 0, "%s: %s", yaml, e.message);
    char *js;
    size_t jl;
    ck_assert_int_eq(mcp_schema_to_json(S, T "Wkt", out, n, 0, &js, &jl, &e), 0);
    ck_assert_msg(!strcmp(js, want), "%s: got %s, want %s", yaml, js, want);
    mcp_schema_free_bytes(S, js);
    mcp_schema_free_bytes(S, out);
  }
}
END_TEST

/* Encodes |yaml| as |type| collecting errors into |errs| (|max|). */
static int enc_all(const char *type, const char *yaml, mcp_schema_error *errs, size_t max,
                   size_t *nerr) {
  mcp_schema_docs *d;
  mcp_schema_error e;
  ck_assert_int_eq(mcp_schema_parse_yaml(NULL, yaml, strlen(yaml), &d, &e), 0);
  uint8_t *out = (uint8_t *)"untouched";
  size_t n = 7;
  int rc = mcp_schema_encode_all(S, type, mcp_schema_docs_root(d, 0), "spec", 0, &out, &n, errs,
                                 max, nerr);
  mcp_schema_docs_free(d);
  if (rc) {
    ck_assert_str_eq((const char *)out, "untouched");
    ck_assert_uint_eq(n, 7);
  } else {
    mcp_schema_free_bytes(S, out);
  }
  return rc;
}

START_TEST(test_encode_all_reports_every_mismatch_in_line_order) {
  /* Fields are encoded in number order (fInt32 before fString), errors
   * come in line order; a bad field, list item, map entry and nested
   * field each count; what follows a bad one is still checked. */
  const char *y = "fString: 12\n"
                  "fInt32: x\n"
                  "nope: 1\n"
                  "fMessage:\n"
                  "  child: {n: y}\n"
                  "fBool: true\n";
  mcp_schema_error errs[8];
  size_t nerr = 0;
  ck_assert_int_eq(enc_all(T "Scalars", y, errs, 8, &nerr), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(nerr, 4);
  ck_assert_str_eq(errs[0].message, "spec.fString: expected a string, got 12");
  ck_assert_str_eq(errs[1].message, "spec.fInt32: expected an integer, got \"x\"");
  ck_assert_str_eq(errs[2].message,
                   "spec.nope: unknown field (mcp.schema.test.Scalars has no field \"nope\")");
  ck_assert_str_eq(errs[3].message, "spec.fMessage.child.n: expected an integer, got \"y\"");
  for (size_t i = 0; i < 4; i++) {
    ck_assert_uint_eq(errs[i].line, i + 1 + (i == 3));
    ck_assert_int_eq(errs[i].code, MCP_ERR_INVALID_ARGUMENT);
  }
  ck_assert_int_eq(enc_all(T "Repeated", "rInt32: [x, 1, y]\nrMessage: [{n: a}, {n: 2}]\n",
                           errs, 8, &nerr),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(nerr, 3);
  ck_assert_str_eq(errs[0].path, "spec.rInt32[0]");
  ck_assert_str_eq(errs[1].path, "spec.rInt32[2]");
  ck_assert_str_eq(errs[2].path, "spec.rMessage[0].n");
  ck_assert_int_eq(enc_all(T "Maps", "mInt32: {a: 1, '2': x, '3': z}\nmString: {k: null}\n",
                           errs, 8, &nerr),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(nerr, 4);
  ck_assert_str_eq(errs[0].message, "spec.mInt32[a]: expected an integer, got \"a\"");
  ck_assert_str_eq(errs[1].path, "spec.mInt32[2]");
  ck_assert_str_eq(errs[2].path, "spec.mInt32[3]");
  ck_assert_str_eq(errs[3].message, "spec.mString[k]: null is not allowed as a map value");
  /* Three bad durations: three errors, one edit. */
  ck_assert_int_eq(enc_all(T "Maps", "mDuration:\n  a: 30 ms\n  b: 1s\n  c: 5x\n  d: '1.5'\n",
                           errs, 8, &nerr),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(nerr, 3);
  ck_assert_uint_eq(errs[0].line, 2);
  ck_assert_uint_eq(errs[1].line, 4);
  ck_assert_uint_eq(errs[2].line, 5);
  /* A good document: 0 errors, errs untouched. */
  strcpy(errs[0].message, "mark");
  nerr = 5;
  ck_assert_int_eq(enc_all(T "Scalars", "fInt32: 1\n", errs, 8, &nerr), 0);
  ck_assert_uint_eq(nerr, 0);
  ck_assert_str_eq(errs[0].message, "mark");
}
END_TEST

START_TEST(test_encode_all_keeps_the_first_by_line_and_counts_the_rest) {
  /* 25 bad items: the first 20 by line kept, 25 counted. */
  char y[1024] = "rInt32:\n";
  for (int i = 0; i < 25; i++)
    strcat(y, "- x\n");
  mcp_schema_error errs[MCP_SCHEMA_ERRORS_SHOWN];
  size_t nerr = 0;
  ck_assert_int_eq(enc_all(T "Repeated", y, errs, MCP_SCHEMA_ERRORS_SHOWN, &nerr),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(nerr, 25);
  for (size_t i = 0; i < MCP_SCHEMA_ERRORS_SHOWN; i++)
    ck_assert_uint_eq(errs[i].line, i + 2);
  /* Found out of line order (fields by number): still the first lines. */
  ck_assert_int_eq(enc_all(T "Scalars", "fString: 1\nfInt32: x\nfBool: 0\n", errs, 2, &nerr),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(nerr, 3);
  ck_assert_uint_eq(errs[0].line, 1);
  ck_assert_uint_eq(errs[1].line, 2);
  /* No room at all: counted only. */
  ck_assert_int_eq(enc_all(T "Scalars", "fString: 1\nfInt32: x\n", NULL, 0, &nerr),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(nerr, 2);
  /* A type that does not exist: that error alone. */
  ck_assert_int_eq(enc_all(T "Nope", "a: 1\n", errs, 2, &nerr), MCP_ERR_NOT_FOUND);
  ck_assert_uint_eq(nerr, 1);
  ck_assert_int_eq(errs[0].code, MCP_ERR_NOT_FOUND);
}
END_TEST

START_TEST(test_unknown_fields_ignored_on_request) {
  uint8_t *out;
  size_t n;
  mcp_schema_error e;
  ck_assert_int_eq(enc(T "Scalars", "{zz: 1, fInt32: 1}", NULL, MCP_SCHEMA_IGNORE_UNKNOWN_FIELDS,
                       &out, &n, &e),
                   0);
  ck_assert_uint_eq(n, 2);
  mcp_schema_free_bytes(S, out);
  ck_assert_int_eq(enc(T "Scalars", "{zz: 1}", NULL, 0, &out, &n, &e), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.path, "zz");
}
END_TEST

START_TEST(test_unknown_type_is_not_found) {
  uint8_t *out;
  size_t n;
  mcp_schema_error e;
  ck_assert_int_eq(enc("no.Such", "{}", NULL, 0, &out, &n, &e), MCP_ERR_NOT_FOUND);
  ck_assert_int_eq(mcp_schema_has_message(S, T "Inner"), 1);
  ck_assert_int_eq(mcp_schema_has_message(S, T "Color"), 0);
  ck_assert_int_eq(mcp_schema_has_message(S, "google.protobuf.Duration"), 1);
}
END_TEST

/* The direct encoder leaves a document near the parser's node limit to
 * the parser (encode_yaml.c dx_event()), which refuses it: the same answer
 * as parsing it. */
START_TEST(test_a_document_past_the_node_limit_is_refused_as_the_parser_refuses_it) {
  size_t items = 1000001, len = 0;
  char *text = malloc(16 + 2 * items);
  ck_assert_ptr_nonnull(text);
  len += (size_t)sprintf(text, "rInt32: [");
  for (size_t i = 0; i < items; i++)
    text[len++] = '0', text[len++] = i + 1 < items ? ',' : ']';
  text[len++] = '\n';
  mcp_schema_docs *d = NULL;
  mcp_schema_error ep, ee;
  int rp = mcp_schema_parse_yaml(NULL, text, len, &d, &ep);
  ck_assert_int_eq(rp, MCP_ERR_LIMIT);
  uint8_t *out = NULL;
  size_t n = 0;
  int re = mcp_schema_encode_yaml(S, T "Repeated", text, len, NULL, 0, &out, &n, &ee);
  ck_assert_int_eq(re, rp);
  ck_assert_str_eq(ee.message, ep.message);
  ck_assert_ptr_null(out);
  free(text);
}
END_TEST

START_TEST(test_nesting_beyond_max_depth_is_a_limit_error) {
  /* JSON, 150 levels of Inner.child: deeper than the schema's 100. */
  char buf[4096] = "";
  for (int i = 0; i < 150; i++)
    strcat(buf, "{\"child\":");
  strcat(buf, "{}");
  for (int i = 0; i < 150; i++)
    strcat(buf, "}");
  mcp_schema_parse_options po;
  mcp_schema_parse_options_default(&po);
  po.max_depth = 200;
  mcp_schema_docs *d;
  mcp_schema_error e;
  ck_assert_int_eq(mcp_schema_parse_json(&po, buf, strlen(buf), &d, &e), 0);
  uint8_t *out;
  size_t n;
  ck_assert_int_eq(mcp_schema_encode(S, T "Inner", mcp_schema_docs_root(d, 0), NULL, 0, &out,
                                     &n, &e),
                   MCP_ERR_LIMIT);
  mcp_schema_docs_free(d);
  /* and the parser's own limit (64 by default) */
  ck_assert_int_eq(mcp_schema_parse_json(NULL, buf, strlen(buf), &d, &e), MCP_ERR_LIMIT);
}
END_TEST

/* ---- descriptor sets ------------------------------------------------- */

/* A set with one file |name| in package p: message M { <type> f = 1; }. */
static size_t one_file_set(const char *name, const char *msg, const char *field_type,
                           uint8_t *buf) {
  Google__Protobuf__FieldDescriptorProto f = GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__INIT;
  f.name = (char *)"f";
  f.has_number = 1;
  f.number = 1;
  f.has_type = 1;
  f.type = GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__TYPE__TYPE_MESSAGE;
  f.has_label = 1;
  f.label = GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__LABEL__LABEL_OPTIONAL;
  f.type_name = (char *)field_type;
  Google__Protobuf__FieldDescriptorProto *fs[] = {&f};
  Google__Protobuf__DescriptorProto m = GOOGLE__PROTOBUF__DESCRIPTOR_PROTO__INIT;
  m.name = (char *)msg;
  m.n_field = 1;
  m.field = fs;
  Google__Protobuf__DescriptorProto *ms[] = {&m};
  Google__Protobuf__FileDescriptorProto fd = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_PROTO__INIT;
  fd.name = (char *)name;
  fd.package = (char *)"p";
  fd.syntax = (char *)"proto3";
  fd.n_message_type = 1;
  fd.message_type = ms;
  Google__Protobuf__FileDescriptorProto *fds[] = {&fd};
  Google__Protobuf__FileDescriptorSet set = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_SET__INIT;
  set.n_file = 1;
  set.file = fds;
  return google__protobuf__file_descriptor_set__pack(&set, buf);
}

START_TEST(test_descriptor_set_unresolved_type_changes_nothing) {
  uint8_t buf[512];
  mcp_schema_error e;
  size_t n = one_file_set("a.proto", "A", ".p.Missing", buf);
  size_t before = mcp_schema_message_count(S);
  ck_assert_int_eq(mcp_schema_add_descriptor_set(S, buf, n, &e), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.message,
                   "p.A.f: unknown message type p.Missing (missing --include_imports?)");
  ck_assert_int_eq(mcp_schema_has_message(S, "p.A"), 0);
  ck_assert_uint_eq(mcp_schema_message_count(S), before);
  /* The same file name may then be added with a resolvable content. */
  n = one_file_set("a.proto", "A", ".google.protobuf.Duration", buf);
  ck_assert_int_eq(mcp_schema_add_descriptor_set(S, buf, n, &e), 0);
  ck_assert_int_eq(mcp_schema_has_message(S, "p.A"), 1);
  ck_assert_str_eq(mcp_schema_message_name(S, before), "p.A");
  /* identical again: ignored; different: refused */
  ck_assert_int_eq(mcp_schema_add_descriptor_set(S, buf, n, &e), 0);
  ck_assert_uint_eq(mcp_schema_message_count(S), before + 1);
  n = one_file_set("a.proto", "B", ".google.protobuf.Duration", buf);
  ck_assert_int_eq(mcp_schema_add_descriptor_set(S, buf, n, &e), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.message, "file a.proto is already loaded with different contents");
  ck_assert_int_eq(mcp_schema_has_message(S, "p.B"), 0);
  /* a type defined twice, under another file name */
  n = one_file_set("b.proto", "A", ".google.protobuf.Duration", buf);
  ck_assert_int_eq(mcp_schema_add_descriptor_set(S, buf, n, &e), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.message, "type p.A defined twice");
  ck_assert_int_eq(mcp_schema_has_message(S, "p.A"), 1);
}
END_TEST

START_TEST(test_descriptor_set_garbage_is_malformed) {
  mcp_schema_error e;
  const uint8_t junk[] = {0x0a, 0x05, 0x01};
  ck_assert_int_eq(mcp_schema_add_descriptor_set(S, junk, sizeof junk, &e), MCP_ERR_MALFORMED);
  /* the same set twice is fine */
  ck_assert_int_eq(mcp_schema_add_descriptor_set(S, kinds, kinds_len, &e), 0);
}
END_TEST

START_TEST(test_type_url_helpers) {
  char buf[64];
  ck_assert_uint_eq(mcp_schema_type_url("a.B", buf, sizeof buf), 23);
  ck_assert_str_eq(buf, "type.googleapis.com/a.B");
  ck_assert_uint_eq(mcp_schema_type_url("a.B", buf, 23), 23); /* no room for the NUL */
  ck_assert_str_eq(mcp_schema_type_name("type.googleapis.com/a.B"), "a.B");
  ck_assert_str_eq(mcp_schema_type_name("x/y/a.B"), "a.B");
  ck_assert_str_eq(mcp_schema_type_name("a.B"), "a.B");
}
END_TEST

/* ---- parsers --------------------------------------------------------- */

START_TEST(test_yaml_scalars_resolve_by_the_core_schema) {
  mcp_schema_docs *d;
  mcp_schema_error e;
  const char *y = "a: [~, null, true, False, 12, -0x1, 0o7, 1.5e3, .inf, '12', \"true\", yes, "
                  "!!str 5, !!int '7']\n---\nb: 1\n";
  ck_assert_int_eq(mcp_schema_parse_yaml(NULL, y, strlen(y), &d, &e), 0);
  ck_assert_uint_eq(mcp_schema_docs_count(d), 2);
  const mcp_schema_value *a = mcp_schema_value_get(mcp_schema_docs_root(d, 0), "a");
  ck_assert_ptr_nonnull(a);
  static const mcp_schema_kind k[] = {
      MCP_SCHEMA_NULL,   MCP_SCHEMA_NULL,   MCP_SCHEMA_BOOL,   MCP_SCHEMA_BOOL,
      MCP_SCHEMA_NUMBER, MCP_SCHEMA_STRING, MCP_SCHEMA_NUMBER, MCP_SCHEMA_NUMBER,
      MCP_SCHEMA_NUMBER, MCP_SCHEMA_STRING, MCP_SCHEMA_STRING, MCP_SCHEMA_STRING,
      MCP_SCHEMA_STRING, MCP_SCHEMA_NUMBER};
  ck_assert_uint_eq(a->n, sizeof k / sizeof k[0]);
  for (size_t i = 0; i < a->n; i++)
    ck_assert_msg(a->kids[i]->kind == k[i], "item %zu (%s): kind %d", i, a->kids[i]->text,
                  a->kids[i]->kind);
  ck_assert_int_eq(a->kids[3]->boolean, 0);
  ck_assert_str_eq(a->kids[7]->text, "1.5e3");
  mcp_schema_docs_free(d);
}
END_TEST

START_TEST(test_yaml_aliases_expand_and_bombs_stop) {
  mcp_schema_docs *d;
  mcp_schema_error e;
  const char *y = "fMessage: &m {name: a}\nrMessage: [*m, *m]\n";
  ck_assert_int_eq(mcp_schema_parse_yaml(NULL, y, strlen(y), &d, &e), 0);
  uint8_t *out;
  size_t n;
  ck_assert_int_eq(mcp_schema_encode(S, T "Repeated", mcp_schema_docs_root(d, 0), NULL,
                                     MCP_SCHEMA_IGNORE_UNKNOWN_FIELDS, &out, &n, &e),
                   0);
  char h[64];
  hex(out, n, h);
  ck_assert_str_eq(h, "9a01030a01619a01030a0161");
  mcp_schema_free_bytes(S, out);
  mcp_schema_docs_free(d);
  /* A redefined anchor: the latest wins; anchors end with their document. */
  const char *re = "a: &x 1\nb: &x 2\nc: *x\n---\nd: *x\n";
  ck_assert_int_eq(mcp_schema_parse_yaml(NULL, re, (size_t)(strstr(re, "---") - re), &d, &e), 0);
  ck_assert_str_eq(mcp_schema_value_get(mcp_schema_docs_root(d, 0), "c")->text, "2");
  mcp_schema_docs_free(d);
  ck_assert_int_eq(mcp_schema_parse_yaml(NULL, re, strlen(re), &d, &e), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.message, "alias *x: no such anchor before it (or a recursive alias)");
  ck_assert_uint_eq(e.line, 5);
  /* many anchors (the table grows), each found again */
  char many[20000] = "";
  for (int i = 0; i < 500; i++)
    sprintf(many + strlen(many), "k%d: &a%d %d\n", i, i, i);
  strcat(many, "all: [*a0, *a499, *a250]\n");
  ck_assert_int_eq(mcp_schema_parse_yaml(NULL, many, strlen(many), &d, &e), 0);
  const mcp_schema_value *all = mcp_schema_value_get(mcp_schema_docs_root(d, 0), "all");
  ck_assert_str_eq(all->kids[0]->text, "0");
  ck_assert_str_eq(all->kids[1]->text, "499");
  ck_assert_str_eq(all->kids[2]->text, "250");
  mcp_schema_docs_free(d);
  /* a billion laughs */
  const char *bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                     "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                     "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
                     "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
                     "g: [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n";
  ck_assert_int_eq(mcp_schema_parse_yaml(NULL, bomb, strlen(bomb), &d, &e), MCP_ERR_LIMIT);
  ck_assert_uint_eq(e.line, 6); /* f: 10^6 nodes */
}
END_TEST

START_TEST(test_yaml_errors_have_lines) {
  mcp_schema_docs *d = NULL;
  mcp_schema_error e;
  const char *dup = "a: 1\nb: 2\na: 3\n";
  ck_assert_int_eq(mcp_schema_parse_yaml(NULL, dup, strlen(dup), &d, &e),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.message, "duplicate key \"a\"");
  ck_assert_uint_eq(e.line, 3);
  /* a larger map (sorted to find them) */
  const char *dup10 = "{k0: 0, k1: 1, k2: 2, k3: 3, k4: 4, k5: 5, k6: 6, k7: 7, k8: 8,\n k9: 9, k3: x}";
  ck_assert_int_eq(mcp_schema_parse_yaml(NULL, dup10, strlen(dup10), &d, &e),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.message, "duplicate key \"k3\"");
  ck_assert_uint_eq(e.line, 2);
  const char *syn = "a: 1\nb: [\n";
  ck_assert_int_eq(mcp_schema_parse_yaml(NULL, syn, strlen(syn), &d, &e),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(e.line, 3);
  const char *tag = "a: !!binary AAAA\n";
  ck_assert_int_eq(mcp_schema_parse_yaml(NULL, tag, strlen(tag), &d, &e),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.message, "unsupported tag (tag:yaml.org,2002:binary)");
  const char *key = "? [a]\n: 1\n";
  ck_assert_int_eq(mcp_schema_parse_yaml(NULL, key, strlen(key), &d, &e),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.message, "a mapping key is not a scalar");
  ck_assert_ptr_null(d);
}
END_TEST

START_TEST(test_json_parser_strict_with_lines) {
  static const struct {
    const char *text, *message;
    unsigned long line;
  } cases[] = {
      {"{\"a\": 1,\n \"a\": 2}", "JSON: duplicate key \"a\"", 2},
      {"{\"a\": 01}", "JSON: unexpected character", 1},
      {"{\"a\": 1,}", "JSON: expected a string key", 1},
      {"[1,\n\n2", "JSON: expected ',' or ']'", 3},
      {"\"\\ud800\"", "JSON: unpaired surrogate in a string", 1},
      {"\"a\tb\"", "JSON: control character in a string", 1},
      {"\"\xff\"", "JSON: invalid UTF-8 in a string", 1},
      {"{} x", "JSON: trailing characters after the value", 1},
      {"tru", "JSON: unexpected character", 1},
      {"nullx", "JSON: unexpected character", 1},
      {"", "JSON: unexpected end of input", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mcp_schema_docs *d = NULL;
    mcp_schema_error e;
    ck_assert_int_eq(
        mcp_schema_parse_json(NULL, cases[i].text, strlen(cases[i].text), &d, &e),
        MCP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(e.message, cases[i].message);
    ck_assert_uint_eq(e.line, cases[i].line);
    ck_assert_ptr_null(d);
  }
  mcp_schema_docs *d;
  mcp_schema_error e;
  const char *ok = "{\"s\": \"\\u00e9\\ud834\\udd1e\\n\\\"\", \"n\": -1.5e+3, \"z\": [true, "
                   "null]}";
  ck_assert_int_eq(mcp_schema_parse_json(NULL, ok, strlen(ok), &d, &e), 0);
  const mcp_schema_value *r = mcp_schema_docs_root(d, 0);
  ck_assert_str_eq(mcp_schema_value_get(r, "s")->text, "\xc3\xa9\xf0\x9d\x84\x9e\n\"");
  ck_assert_str_eq(mcp_schema_value_get(r, "n")->text, "-1.5e+3");
  ck_assert_int_eq(mcp_schema_value_get(r, "z")->kids[1]->kind, MCP_SCHEMA_NULL);
  mcp_schema_docs_free(d);
}
END_TEST

/* ---- decoder --------------------------------------------------------- */

static void expect_json(const char *type, const char *yaml, unsigned flags, const char *want) {
  uint8_t *out;
  size_t n;
  mcp_schema_error e;
  ck_assert_msg(enc(type, yaml, NULL, 0, &out, &n, &e) == 0, "%s", e.message);
  char *js;
  size_t jl;
  ck_assert_msg(mcp_schema_to_json(S, type, out, n, flags, &js, &jl, &e) == 0, "%s", e.message);
  ck_assert_str_eq(js, want);
  ck_assert_uint_eq(jl, strlen(want));
  mcp_schema_free_bytes(S, js);
  mcp_schema_free_bytes(S, out);
}

START_TEST(test_decoder_writes_proto3_json) {
  expect_json(T "Scalars", "{fInt64: 5, fUint64: 6, fInt32: -1, fBytes: AP8=, fEnum: 9, fFloat: 0.1, "
              "fDouble: 'NaN', fString: \"a\\u0001\\\"\"}",
              0,
              "{\"fDouble\":\"NaN\",\"fFloat\":0.1,\"fInt64\":\"5\",\"fUint64\":\"6\",\"fInt32\":-1,"
              "\"fString\":\"a\\u0001\\\"\",\"fBytes\":\"AP8=\",\"fEnum\":9}");
  expect_json(T "Scalars", "{fEnum: BLUE, fMessage: {}}", MCP_SCHEMA_JSON_PROTO_NAMES,
              "{\"f_enum\":\"BLUE\",\"f_message\":{}}");
  expect_json(T "Maps", "mSint32: {'-7': RED, '3': 0}", MCP_SCHEMA_JSON_PRETTY,
              "{\n  \"mSint32\": {\n    \"-7\": \"RED\",\n    \"3\": \"COLOR_UNSPECIFIED\"\n  }\n}");
  expect_json(T "Wkt", "{duration: -0.5s, timestamp: '2024-01-01T10:00:00.5+02:00', "
              "mask: 'aB.c,d', struct: {x: [1, null]}, wInt64: 0, null: null, "
              "any: {'@type': type.googleapis.com/google.protobuf.Duration, value: 3s}}",
              0,
              "{\"any\":{\"@type\":\"type.googleapis.com/google.protobuf.Duration\",\"value\":\"3s\"},"
              "\"duration\":\"-0.500s\",\"timestamp\":\"2024-01-01T08:00:00.500Z\","
              "\"struct\":{\"x\":[1,null]},\"mask\":\"aB.c,d\",\"wInt64\":\"0\"}");
  expect_json(T "Wkt", "nulls: [null, null]", 0, "{\"nulls\":[null,null]}");
  expect_json(T "Oneofs", "{oInt32: 0, optEnum: 0}", 0,
              "{\"oInt32\":0,\"optEnum\":\"COLOR_UNSPECIFIED\"}");
}
END_TEST

START_TEST(test_decoder_refuses_malformed_bytes) {
  static const struct {
    const char *type;
    const char *bytes;
    size_t len;
    const char *message;
  } cases[] = {
      {T "Scalars", "\x28", 1, "truncated varint (field 5)"},
      {T "Scalars", "\x4a\x05\x61", 3, "truncated length-delimited field 9"},
      {T "Scalars", "\x29\x01\x02\x03\x04\x05\x06\x07\x08", 9,
       "field f_int32 has wire type 1, expected 0"},
      {T "Scalars", "\x4a\x01\xff", 3, "fString: a string that is not valid UTF-8"},
      {T "Scalars", "\x0b", 1, "wire type 3 (field 1) is not supported"},
      {T "Wkt", "\x0a\x06\x0a\x04\x78\x2f\x79\x2e", 8,
       "any: an Any of an unknown type \"x/y.\""},
      {T "Wkt", "\x2a\x00", 2, "value: a google.protobuf.Value with no kind set"},
      {T "Wkt", "\x12\x0b\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 13,
       "duration: Duration out of range (-9223372036854775808 s, 0 ns)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *js = (char *)"untouched";
    size_t jl = 7;
    mcp_schema_error e;
    ck_assert_int_eq(mcp_schema_to_json(S, cases[i].type, (const uint8_t *)cases[i].bytes,
                                        cases[i].len, 0, &js, &jl, &e),
                     MCP_ERR_MALFORMED);
    ck_assert_str_eq(e.message, cases[i].message);
    ck_assert_str_eq(js, "untouched");
    ck_assert_uint_eq(jl, 7);
  }
}
END_TEST

START_TEST(test_decoder_skips_unknown_fields_unless_told) {
  const uint8_t b[] = {0xf8, 0x01, 0x05, 0x28, 0x01}; /* field 31 = 5, fInt32 = 1 */
  char *js;
  size_t jl;
  mcp_schema_error e;
  ck_assert_int_eq(mcp_schema_to_json(S, T "Scalars", b, sizeof b, 0, &js, &jl, &e), 0);
  ck_assert_str_eq(js, "{\"fInt32\":1}");
  mcp_schema_free_bytes(S, js);
  ck_assert_int_eq(mcp_schema_to_json(S, T "Scalars", b, sizeof b, MCP_SCHEMA_JSON_UNKNOWN_ERROR,
                                      &js, &jl, &e),
                   MCP_ERR_MALFORMED);
  ck_assert_str_eq(e.message, "unknown field number 31 in mcp.schema.test.Scalars");
}
END_TEST

START_TEST(test_decoder_last_value_and_oneof_member_win) {
  /* fInt32 = 1 then 2; oString "a" then oInt32 3; a message twice: merged */
  const uint8_t s[] = {0x28, 0x01, 0x28, 0x02, 0x9a, 0x01, 0x02, 0x10, 0x01, 0x9a, 0x01, 0x03,
                       0x0a, 0x01, 0x61};
  const uint8_t o[] = {0x0a, 0x01, 0x61, 0x10, 0x03};
  char *js;
  size_t jl;
  mcp_schema_error e;
  ck_assert_int_eq(mcp_schema_to_json(S, T "Scalars", s, sizeof s, 0, &js, &jl, &e), 0);
  ck_assert_str_eq(js, "{\"fInt32\":2,\"fMessage\":{\"name\":\"a\",\"n\":1}}");
  mcp_schema_free_bytes(S, js);
  ck_assert_int_eq(mcp_schema_to_json(S, T "Oneofs", o, sizeof o, 0, &js, &jl, &e), 0);
  ck_assert_str_eq(js, "{\"oInt32\":3}");
  mcp_schema_free_bytes(S, js);
}
END_TEST

START_TEST(test_decoder_map_entry_without_value_gives_the_default) {
  /* mMessage {key "a"} (no value), mInt32 {value 5} (no key): found by
   * fuzz_schema (a NULL value pointer reached the wire reader). */
  const uint8_t b[] = {0x6a, 0x03, 0x0a, 0x01, 0x61, 0x12, 0x02, 0x10, 0x05};
  char *js;
  size_t jl;
  mcp_schema_error e;
  ck_assert_int_eq(mcp_schema_to_json(S, T "Maps", b, sizeof b, 0, &js, &jl, &e), 0);
  ck_assert_str_eq(js, "{\"mInt32\":{\"0\":5},\"mMessage\":{\"a\":{}}}");
  mcp_schema_free_bytes(S, js);
}
END_TEST

START_TEST(test_decoder_map_out_of_key_order_keeps_each_value_with_its_key) {
  /* mString {"b": "2"}, {"c": "3"}, {"a": "1"}: a peer other than our
   * encoder may send any order; sorting must move the values along. */
  const uint8_t b[] = {0x0a, 0x06, 0x0a, 0x01, 'b', 0x12, 0x01, '2',
                       0x0a, 0x06, 0x0a, 0x01, 'c', 0x12, 0x01, '3',
                       0x0a, 0x06, 0x0a, 0x01, 'a', 0x12, 0x01, '1'};
  char *js;
  size_t jl;
  mcp_schema_error e;
  ck_assert_int_eq(mcp_schema_to_json(S, T "Maps", b, sizeof b, 0, &js, &jl, &e), 0);
  ck_assert_str_eq(js, "{\"mString\":{\"a\":\"1\",\"b\":\"2\",\"c\":\"3\"}}");
  mcp_schema_free_bytes(S, js);
}
END_TEST

START_TEST(test_loose_values_write_what_strict_refuses_and_keep_struct_wire_order) {
  /* Struct {"b": NaN, "a": <no kind>, "b": 2^54, "c": -0.0}. */
  const uint8_t b[] = {
      0x0a, 0x0e, 0x0a, 0x01, 'b', 0x12, 0x09, 0x11, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f,
      0x0a, 0x05, 0x0a, 0x01, 'a', 0x12, 0x00,
      0x0a, 0x0e, 0x0a, 0x01, 'b', 0x12, 0x09, 0x11, 0, 0, 0, 0, 0, 0, 0x50, 0x43,
      0x0a, 0x0e, 0x0a, 0x01, 'c', 0x12, 0x09, 0x11, 0, 0, 0, 0, 0, 0, 0, 0x80};
  const char *st = "google.protobuf.Struct";
  char *js;
  size_t jl;
  mcp_schema_error e;
  ck_assert_int_eq(mcp_schema_to_json(S, st, b, sizeof b, 0, &js, &jl, &e), MCP_ERR_MALFORMED);
  ck_assert_int_eq(mcp_schema_to_json(S, st, b, sizeof b, MCP_SCHEMA_JSON_LOOSE_VALUES, &js,
                                      &jl, &e), 0);
  ck_assert_str_eq(js, "{\"b\":18014398509481984.0,\"a\":null,\"c\":0}");
  mcp_schema_free_bytes(S, js);
  /* NaN alone, and a whole number that is not too large. */
  const uint8_t n[] = {0x0a, 0x0e, 0x0a, 0x01, 'n', 0x12, 0x09, 0x11, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f,
                       0x0a, 0x0e, 0x0a, 0x01, 'w', 0x12, 0x09, 0x11, 0, 0, 0, 0, 0, 0x6a, 0xf8, 0x40};
  ck_assert_int_eq(mcp_schema_to_json(S, st, n, sizeof n, MCP_SCHEMA_JSON_LOOSE_VALUES, &js,
                                      &jl, &e), 0);
  ck_assert_str_eq(js, "{\"n\":\"NaN\",\"w\":100000}");
  mcp_schema_free_bytes(S, js);
}
END_TEST

START_TEST(test_timestamp_text_and_base64_are_proto3_json_forms) {
  char b[MCP_SCHEMA_TIMESTAMP_TEXT_MAX];
  ck_assert_int_eq(mcp_schema_timestamp_text(253402300799LL, 999999999, b, sizeof b), 30);
  ck_assert_str_eq(b, "9999-12-31T23:59:59.999999999Z");
  ck_assert_int_eq(mcp_schema_timestamp_text(-1, 1000, b, sizeof b), 27);
  ck_assert_str_eq(b, "1969-12-31T23:59:59.000001Z");
  ck_assert_int_eq(mcp_schema_timestamp_text(253402300800LL, 0, b, sizeof b),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_schema_timestamp_text(0, -1, b, sizeof b), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_schema_timestamp_text(0, 0, b, 20), MCP_ERR_LIMIT);
  char *s;
  size_t sl;
  ck_assert_int_eq(mcp_schema_base64(S, (const uint8_t *)"\xfb\xff", 2, &s, &sl), 0);
  ck_assert_str_eq(s, "+/8=");
  ck_assert_uint_eq(sl, 4);
  mcp_schema_free_bytes(S, s);
  ck_assert_int_eq(mcp_schema_base64(S, NULL, 0, &s, NULL), 0);
  ck_assert_str_eq(s, "");
  mcp_schema_free_bytes(S, s);
  ck_assert_int_eq(mcp_schema_base64(S, NULL, 3, &s, NULL), MCP_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_nul_in_map_keys_round_trips_and_in_field_names_is_refused) {
  const char *j = "{\"mString\": {\"a\\u0000b\": \"x\"}}";
  mcp_schema_docs *d;
  mcp_schema_error e;
  uint8_t *out;
  size_t n;
  char *js;
  size_t jl;
  ck_assert_int_eq(mcp_schema_parse_json(NULL, j, strlen(j), &d, &e), 0);
  ck_assert_int_eq(mcp_schema_encode(S, T "Maps", mcp_schema_docs_root(d, 0), NULL, 0, &out, &n, &e), 0);
  mcp_schema_docs_free(d);
  ck_assert_int_eq(mcp_schema_to_json(S, T "Maps", out, n, 0, &js, &jl, &e), 0);
  ck_assert_str_eq(js, "{\"mString\":{\"a\\u0000b\":\"x\"}}");
  mcp_schema_free_bytes(S, js);
  mcp_schema_free_bytes(S, out);
  const char *f = "{\"fInt32\\u0000x\": 1}";
  ck_assert_int_eq(mcp_schema_parse_json(NULL, f, strlen(f), &d, &e), 0);
  ck_assert_int_eq(mcp_schema_encode(S, T "Scalars", mcp_schema_docs_root(d, 0), NULL, 0, &out, &n, &e),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.message, "a field name with a NUL character");
  mcp_schema_docs_free(d);
}
END_TEST

/* ---- YAML straight to bytes: misuse --------------------------------- */

START_TEST(test_encode_yaml_and_its_encoder_refuse_misuse) {
  uint8_t *out = (uint8_t *)"x";
  size_t n = 7;
  mcp_schema_error e;
  ck_assert_int_eq(mcp_schema_encode_yaml(NULL, T "Inner", "n: 1", 4, NULL, 0, &out, &n, &e),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_schema_encode_yaml(S, NULL, "n: 1", 4, NULL, 0, &out, &n, &e),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_schema_encode_yaml(S, T "Inner", NULL, 4, NULL, 0, &out, &n, &e),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_schema_encode_yaml(S, T "Inner", "n: 1", 4, NULL, 0, NULL, &n, &e),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_schema_encode_yaml(S, "no.Such", "n: 1", 4, NULL, 0, &out, &n, &e),
                   MCP_ERR_NOT_FOUND);
  ck_assert_int_eq(mcp_schema_encode_yaml(S, T "Inner", "n: 1\n---\nn: 2\n", 12, "spec", 0,
                                          &out, &n, &e),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.message, "spec: expected one YAML document, found 2");
  /* A syntax error: the parser's, with its line. */
  mcp_schema_docs *d;
  mcp_schema_error pe;
  ck_assert_int_eq(mcp_schema_parse_yaml(NULL, "n: [", 4, &d, &pe), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_schema_encode_yaml(S, T "Inner", "n: [", 4, NULL, 0, &out, &n, &e),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(e.line, pe.line);
  ck_assert_str_eq(e.message, pe.message);
  ck_assert_str_eq((const char *)out, "x"); /* untouched on failure */
  ck_assert_uint_eq(n, 7);

  mcp_schema_yaml_encoder *x = NULL;
  const uint8_t *b;
  size_t bn;
  mcp_schema_yaml_event ev = {.type = MCP_SCHEMA_YAML_MAP_START};
  ck_assert_int_eq(mcp_schema_yaml_encoder_new(NULL, &x), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_schema_yaml_encoder_new(S, &x), 0);
  /* Before begin(): nothing to take. */
  ck_assert_int_eq(mcp_schema_yaml_encoder_event(x, &ev), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_schema_yaml_encoder_finish(x, &b, &bn), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_schema_yaml_encoder_begin(x, "no.Such"), MCP_ERR_NOT_FOUND);
  ck_assert_int_eq(mcp_schema_yaml_encoder_begin(x, NULL), MCP_ERR_INVALID_ARGUMENT);
  /* A document's start inside a value, a tag: it gives up, and stays so. */
  ck_assert_int_eq(mcp_schema_yaml_encoder_begin(x, T "Inner"), 0);
  mcp_schema_yaml_event doc = {.type = MCP_SCHEMA_YAML_DOC_START};
  ck_assert_int_eq(mcp_schema_yaml_encoder_event(x, &doc), MCP_SCHEMA_YAML_UNSURE);
  ck_assert_int_eq(mcp_schema_yaml_encoder_event(x, &ev), MCP_SCHEMA_YAML_UNSURE);
  ck_assert_int_eq(mcp_schema_yaml_encoder_finish(x, &b, &bn), MCP_SCHEMA_YAML_UNSURE);
  ck_assert_int_eq(mcp_schema_yaml_encoder_begin(x, T "Inner"), 0);
  mcp_schema_yaml_event tagged = {.type = MCP_SCHEMA_YAML_MAP_START, .tag = "!x"};
  ck_assert_int_eq(mcp_schema_yaml_encoder_event(x, &tagged), MCP_SCHEMA_YAML_UNSURE);
  /* A value cut short: finish() gives up; the encoder is ready again. */
  ck_assert_int_eq(mcp_schema_yaml_encoder_begin(x, T "Inner"), 0);
  ck_assert_int_eq(mcp_schema_yaml_encoder_event(x, &ev), 0);
  ck_assert_int_eq(mcp_schema_yaml_encoder_finish(x, &b, &bn), MCP_SCHEMA_YAML_UNSURE);
  ck_assert_int_eq(mcp_schema_yaml_encoder_begin(x, T "Inner"), 0);
  mcp_schema_yaml_event end = {.type = MCP_SCHEMA_YAML_MAP_END};
  ck_assert_int_eq(mcp_schema_yaml_encoder_event(x, &ev), 0);
  ck_assert_int_eq(mcp_schema_yaml_encoder_event(x, &end), 0);
  ck_assert_int_eq(mcp_schema_yaml_encoder_finish(x, &b, &bn), 0);
  ck_assert_uint_eq(bn, 0); /* {}: no field */
  /* A caller's string that is not UTF-8 for a string field: it gives up
   * (the long way names the field); the same bytes as valid UTF-8 encode. */
  for (int valid = 0; valid < 2; valid++) {
    mcp_schema_yaml_event key = {.type = MCP_SCHEMA_YAML_SCALAR, .text = "name", .len = 4};
    mcp_schema_yaml_event val = {.type = MCP_SCHEMA_YAML_SCALAR,
                                 .text = valid ? "\xc3\xa9" : "\xc3\x28",
                                 .len = 2,
                                 .style = MCP_SCHEMA_YAML_DOUBLE_QUOTED};
    ck_assert_int_eq(mcp_schema_yaml_encoder_begin(x, T "Inner"), 0);
    ck_assert_int_eq(mcp_schema_yaml_encoder_event(x, &ev), 0);
    ck_assert_int_eq(mcp_schema_yaml_encoder_event(x, &key), 0);
    ck_assert_int_eq(mcp_schema_yaml_encoder_event(x, &val), valid ? 0 : MCP_SCHEMA_YAML_UNSURE);
    ck_assert_int_eq(mcp_schema_yaml_encoder_event(x, &end), valid ? 0 : MCP_SCHEMA_YAML_UNSURE);
    ck_assert_int_eq(mcp_schema_yaml_encoder_finish(x, &b, &bn), valid ? 0 : MCP_SCHEMA_YAML_UNSURE);
    if (valid)
      ck_assert(bn == 4 && !memcmp(b + 2, "\xc3\xa9", 2));
  }
  mcp_schema_yaml_encoder_free(x);
  mcp_schema_yaml_encoder_free(NULL);
}
END_TEST

/* ---- allocation failures --------------------------------------------- */

typedef struct fmem {
  mcp_mem mem;
  long live, count, fail_at;
} fmem;

static void *f_malloc(size_t n, void *ud) {
  fmem *m = ud;
  if (m->fail_at && ++m->count >= m->fail_at)
    return NULL;
  void *p = malloc(n);
  m->live += p != NULL;
  return p;
}
static void f_free(void *p, void *ud) {
  fmem *m = ud;
  if (p)
    m->live--;
  free(p);
}
static void *f_calloc(size_t a, size_t b, void *ud) {
  void *p = f_malloc(a * b, ud);
  if (p)
    memset(p, 0, a * b);
  return p;
}
static void *f_realloc(void *p, size_t n, void *ud) {
  fmem *m = ud;
  if (!p)
    return f_malloc(n, ud);
  if (m->fail_at && ++m->count >= m->fail_at)
    return NULL;
  return realloc(p, n);
}

/* A scanner's events to an encoder (its document's start and end aside). */
static int to_encoder(void *ctx, const mcp_schema_yaml_event *ev) {
  if (ev->type == MCP_SCHEMA_YAML_DOC_START || ev->type == MCP_SCHEMA_YAML_DOC_END)
    return 0;
  int rc = mcp_schema_yaml_encoder_event(ctx, ev);
  return rc == MCP_SCHEMA_YAML_UNSURE ? 0 : rc; /* finish() says it */
}

/* The whole path: new, load, parse, encode, decode; 0 or MCP_ERR_NOMEM. */
static int whole_path(const mcp_mem *mem) {
  mcp_schema_options so;
  mcp_schema_options_default(&so);
  so.mem = mem;
  mcp_schema *s;
  int rc = mcp_schema_new(&s, &so);
  if (rc)
    return rc;
  mcp_schema_docs *d = NULL;
  uint8_t *out = NULL;
  char *js = NULL;
  size_t n, jl;
  mcp_schema_error e;
  mcp_schema_parse_options po;
  mcp_schema_parse_options_default(&po);
  po.mem = mem;
  const char *y = "fMessage: &m {name: a, child: {n: 1}}\nfString: x\nfBytes: AAEC\n";
  const char *j = "{\"mString\": {\"b\": \"1\", \"a\": \"2\"}, \"mValue\": {\"v\": [1, {\"x\": null}]}}";
  const char *w = "{\"any\": {\"@type\": \"type.googleapis.com/mcp.schema.test.Inner\", \"n\": 2},"
                  " \"timestamp\": \"2020-01-01T00:00:00Z\", \"mask\": \"aB,c\"}";
  if (!(rc = mcp_schema_add_descriptor_set(s, kinds, kinds_len, &e)) &&
      !(rc = mcp_schema_parse_yaml(&po, y, strlen(y), &d, &e)) &&
      !(rc = mcp_schema_encode(s, T "Scalars", mcp_schema_docs_root(d, 0), "spec", 0, &out, &n,
                               &e)))
    rc = mcp_schema_to_json(s, T "Scalars", out, n, MCP_SCHEMA_JSON_PRETTY, &js, &jl, &e);
  mcp_schema_free_bytes(s, js);
  mcp_schema_free_bytes(s, out);
  mcp_schema_docs_free(d);
  js = NULL;
  out = NULL;
  d = NULL;
  /* YAML straight to bytes, a whole document and a value within one:
   * the same bytes, or out of memory (an encoder that gave up here did so
   * for want of memory: with it, this document goes directly). */
  const char *dy = "fMessage: {name: a, child: {n: 1}}\nfString: x\nfEnum: RED\n";
  if (!rc) {
    uint8_t *o1 = NULL;
    size_t n1 = 0;
    rc = mcp_schema_encode_yaml(s, T "Scalars", dy, strlen(dy), "spec", 0, &o1, &n1, &e);
    mcp_schema_yaml_encoder *x = NULL;
    if (!rc && !(rc = mcp_schema_yaml_encoder_new(s, &x)) &&
        !(rc = mcp_schema_yaml_encoder_begin(x, T "Scalars")) &&
        !(rc = mcp_schema_yaml_scan(mem, dy, strlen(dy), 64, to_encoder, x))) {
      const uint8_t *o2;
      size_t n2;
      rc = mcp_schema_yaml_encoder_finish(x, &o2, &n2);
      if (rc == MCP_SCHEMA_YAML_UNSURE)
        rc = MCP_ERR_NOMEM;
      else
        ck_assert(!rc && n2 == n1 && !memcmp(o1, o2, n1));
    }
    mcp_schema_yaml_encoder_free(x);
    mcp_schema_free_bytes(s, o1);
  }
  /* A map of 100 entries in reverse key order: the direct way's segments
   * outgrow its own array and its body outgrows its scratch, so both go to
   * the heap (encode_yaml.c dx_seg_add(), dx_order()). */
  if (!rc) {
    char big[4096];
    size_t bn = (size_t)snprintf(big, sizeof big, "mString:\n");
    for (int i = 99; i >= 0; i--)
      bn += (size_t)snprintf(big + bn, sizeof big - bn, "  k%03d: value-%03d\n", i, i);
    uint8_t *o3 = NULL;
    size_t n3 = 0;
    rc = mcp_schema_encode_yaml(s, T "Maps", big, bn, "spec", 0, &o3, &n3, &e);
    ck_assert(rc || n3 > 1024); /* past the scratch */
    mcp_schema_free_bytes(s, o3);
  }
  /* Every error of a bad document: three, or out of memory. */
  const char *bad = "fString: 1\nfInt32: x\nfMessage: {child: {n: y}, name: [a]}\n";
  if (!rc && !(rc = mcp_schema_parse_yaml(&po, bad, strlen(bad), &d, &e))) {
    mcp_schema_error errs[4];
    size_t nerr = 0;
    rc = mcp_schema_encode_all(s, T "Scalars", mcp_schema_docs_root(d, 0), "spec", 0, &out, &n,
                               errs, 4, &nerr);
    ck_assert_uint_eq(nerr, rc == MCP_ERR_NOMEM ? 1 : 4);
    if (rc == MCP_ERR_NOMEM) {
      ck_assert_int_eq(errs[0].code, MCP_ERR_NOMEM);
    } else {
      ck_assert_int_eq(rc, MCP_ERR_INVALID_ARGUMENT);
      rc = 0;
    }
    mcp_schema_docs_free(d);
    d = NULL;
  }
  for (int k = 0; k < 2 && !rc; k++) {
    const char *t = k ? w : j;
    if (!(rc = mcp_schema_parse_json(&po, t, strlen(t), &d, &e)) &&
        !(rc = mcp_schema_encode(s, k ? T "Wkt" : T "Maps", mcp_schema_docs_root(d, 0), NULL, 0,
                                 &out, &n, &e)))
      rc = mcp_schema_to_json(s, k ? T "Wkt" : T "Maps", out, n, 0, &js, &jl, &e);
    mcp_schema_free_bytes(s, js);
    mcp_schema_free_bytes(s, out);
    mcp_schema_docs_free(d);
    js = NULL;
    out = NULL;
    d = NULL;
  }
  if (rc)
    ck_assert_msg(rc == MCP_ERR_NOMEM, "rc %d: %s", rc, e.message);
  mcp_schema_free(s);
  return rc;
}

START_TEST(test_every_failed_allocation_is_reported_and_leaks_nothing) {
  load_kinds();
  fmem m = {{NULL, f_malloc, f_free, f_calloc, f_realloc}, 0, 0, 0};
  m.mem.user_data = &m;
  ck_assert_int_eq(whole_path(&m.mem), 0);
  ck_assert_int_eq(m.live, 0);
  int done = 0;
  for (long i = 1; !done; i++) {
    m.count = 0;
    m.fail_at = i;
    m.live = 0;
    int rc = whole_path(&m.mem);
    ck_assert_msg(m.live == 0, "failing allocation %ld leaked %ld blocks", i, m.live);
    done = rc == 0;
    ck_assert_msg(i < 100000, "no end");
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("schema");
  TCase *tc = tcase_create("encode");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_scalar_kinds_encode_as_protobuf_does);
  tcase_add_test(tc, test_short_decimals_read_as_strtod_reads_them);
  tcase_add_test(tc, test_field_names_one_byte_off_are_unknown);
  tcase_add_test(tc, test_defaults_are_omitted_unless_the_field_has_presence);
  tcase_add_test(tc, test_fields_are_written_in_number_order);
  tcase_add_test(tc, test_repeated_scalars_are_packed_unless_told_not_to);
  tcase_add_test(tc, test_map_entries_are_sorted_by_key_with_key_and_value);
  tcase_add_test(tc, test_names_json_and_original_both_accepted);
  tcase_add_test(tc, test_well_known_types_use_their_json_forms);
  tcase_add_loop_test(tc, test_bad_document_error_names_path_and_line, 0,
                      (int)(sizeof bads / sizeof bads[0]));
  tcase_add_test(tc, test_go_durations_are_read_as_go_reads_them);
  tcase_add_test(tc, test_encode_all_reports_every_mismatch_in_line_order);
  tcase_add_test(tc, test_encode_all_keeps_the_first_by_line_and_counts_the_rest);
  tcase_add_test(tc, test_unknown_fields_ignored_on_request);
  tcase_add_test(tc, test_encode_yaml_and_its_encoder_refuse_misuse);
  tcase_add_test(tc, test_unknown_type_is_not_found);
  tcase_add_test(tc, test_nesting_beyond_max_depth_is_a_limit_error);
  tcase_add_test(tc, test_a_document_past_the_node_limit_is_refused_as_the_parser_refuses_it);
  suite_add_tcase(s, tc);
  tc = tcase_create("descriptors");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_descriptor_set_unresolved_type_changes_nothing);
  tcase_add_test(tc, test_descriptor_set_garbage_is_malformed);
  tcase_add_test(tc, test_type_url_helpers);
  suite_add_tcase(s, tc);
  tc = tcase_create("parsers");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_yaml_scalars_resolve_by_the_core_schema);
  tcase_add_test(tc, test_yaml_aliases_expand_and_bombs_stop);
  tcase_add_test(tc, test_yaml_errors_have_lines);
  tcase_add_test(tc, test_json_parser_strict_with_lines);
  suite_add_tcase(s, tc);
  tc = tcase_create("decode");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_decoder_writes_proto3_json);
  tcase_add_test(tc, test_decoder_refuses_malformed_bytes);
  tcase_add_test(tc, test_decoder_skips_unknown_fields_unless_told);
  tcase_add_test(tc, test_decoder_last_value_and_oneof_member_win);
  tcase_add_test(tc, test_decoder_map_entry_without_value_gives_the_default);
  tcase_add_test(tc, test_nul_in_map_keys_round_trips_and_in_field_names_is_refused);
  tcase_add_test(tc, test_decoder_map_out_of_key_order_keeps_each_value_with_its_key);
  tcase_add_test(tc, test_loose_values_write_what_strict_refuses_and_keep_struct_wire_order);
  tcase_add_test(tc, test_timestamp_text_and_base64_are_proto3_json_forms);
  suite_add_tcase(s, tc);
  tc = tcase_create("alloc");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_every_failed_allocation_is_reported_and_leaks_nothing);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
