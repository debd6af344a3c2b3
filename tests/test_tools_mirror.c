/*
 * Tests of tools/mcp-sink/mirror.c, mcp-sink's --out mirror: file names of long
 * resource name segments (issue 12, point 4). Real files in a temporary
 * directory; the bodies and create_time the files hold.
 */
#include <check.h>
#include <jansson.h>
#include <stdint.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mcp-sink/mirror.h"

static char dir[64];

static void rm_rf(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0)
    return;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      char sub[2048];
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
        continue;
      snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
      rm_rf(sub);
    }
    if (d)
      closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

static void setup(void) {
  strcpy(dir, "/tmp/mirror-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) { rm_rf(dir); }

static tool_mirror *new_mirror(void) {
  static const char *const colls[] = {"c"};
  tool_mirror *m = NULL;
  char err[256];
  ck_assert_int_eq(tool_mirror_new(&m, dir, colls, 1, err, sizeof err), 0);
  return m;
}

static mcp_resource res(const char *name, const char *version) {
  mcp_resource r;
  memset(&r, 0, sizeof r);
  r.name = name;
  r.version = version;
  r.type_url = "type.googleapis.com/google.protobuf.Struct";
  return r; /* an empty Struct body */
}

/* Applies a full state of |n| resources to collection "c". */
static int full_state(tool_mirror *m, const mcp_resource *r, size_t n,
                      char *msg, size_t msglen) {
  mcp_change ch;
  memset(&ch, 0, sizeof ch);
  ch.collection = "c";
  ch.nonce = "1";
  ch.resources = r;
  ch.nresources = n;
  ch.complete = 1; /* as the core says of every full state */
  msg[0] = '\0';
  return tool_mirror_apply(m, &ch, msg, msglen);
}

/* The "name" field of the JSON file DIR/c/<rel>.json, or "" when absent. */
static const char *name_in_file(const char *rel) {
  static char buf[4096];
  char path[2048];
  snprintf(path, sizeof path, "%s/c/%s.json", dir, rel);
  FILE *f = fopen(path, "r");
  if (!f)
    return "";
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strstr(buf, "\"name\": \"");
  if (!p)
    return "";
  p += strlen("\"name\": \"");
  char *e = strchr(p, '"');
  if (e)
    *e = '\0';
  return p;
}

static int exists(const char *rel) {
  char path[2048];
  struct stat st;
  snprintf(path, sizeof path, "%s/c/%s.json", dir, rel);
  return stat(path, &st) == 0;
}

START_TEST(test_mirror_short_segments_keep_their_names) {
  char *f = tool_mirror_file_of("ns/reviews.default.svc");
  ck_assert_str_eq(f, "ns/reviews.default.svc");
  free(f);
  char seg[201];
  memset(seg, 'a', 200);
  seg[200] = '\0';
  f = tool_mirror_file_of(seg);
  ck_assert_str_eq(f, seg);
  free(f);
}
END_TEST

START_TEST(test_mirror_long_segment_is_prefix_tilde_sha256) {
  char seg[202], want[300];
  memset(seg, 'a', 201);
  seg[201] = '\0';
  /* sha256("a" x 201), from Python's hashlib. */
  memset(want, 'a', 150);
  strcpy(want + 150,
         "~a92efd82109373e58f9a2056dee01e807e216ce6075f7051207c0a9f7d666e50");
  char *f = tool_mirror_file_of(seg);
  ck_assert_str_eq(f, want);
  free(f);
  /* 248 bytes: the padding takes a block of its own (248 % 64 == 56). */
  char seg2[249];
  memset(seg2, 'b', 248);
  seg2[248] = '\0';
  memset(want, 'b', 150);
  strcpy(want + 150,
         "~35dfadbfff332bc3fb82273040158112973780388656f5e505c88c1c13d5d118");
  f = tool_mirror_file_of(seg2);
  ck_assert_str_eq(f, want);
  free(f);
  memset(want, 'a', 150);
  strcpy(want + 150,
         "~a92efd82109373e58f9a2056dee01e807e216ce6075f7051207c0a9f7d666e50");
  /* Both segments, each on its own. */
  char name[500], two[600];
  snprintf(name, sizeof name, "%s/%s", seg, seg);
  snprintf(two, sizeof two, "%s/%s", want, want);
  f = tool_mirror_file_of(name);
  ck_assert_str_eq(f, two);
  free(f);
}
END_TEST

START_TEST(test_mirror_mapped_prefix_does_not_cut_a_utf8_character) {
  char seg[400];
  size_t k = 0;
  seg[k++] = 'x'; /* "é" (2 bytes) then starts at odd offsets: 149 is one */
  while (k < 300) {
    seg[k++] = (char)0xc3;
    seg[k++] = (char)0xa9;
  }
  seg[k] = '\0';
  char *f = tool_mirror_file_of(seg);
  ck_assert_ptr_nonnull(strchr(f, '~'));
  ck_assert_uint_eq((size_t)(strchr(f, '~') - f), 149);
  free(f);
}
END_TEST

/* Issue 12, point 4: a name segment of 251+ bytes was a NACK of every push
 * of the collection (the file name was too long). */
START_TEST(test_mirror_writes_a_251_byte_segment_instead_of_nacking) {
  tool_mirror *m = new_mirror();
  char longname[600], other[600], msg[300];
  /* A Kubernetes name: one subdomain of 251 bytes, in a namespace. */
  strcpy(longname, "ns/");
  memset(longname + 3, 'b', 251);
  longname[254] = '\0';
  /* Same first 150 bytes, another end. */
  strcpy(other, longname);
  other[253] = 'c';
  mcp_resource r[3] = {res(longname, "1"), res(other, "1"), res("ns/short", "1")};
  ck_assert_int_eq(full_state(m, r, 3, msg, sizeof msg), 0);
  char *f1 = tool_mirror_file_of(longname), *f2 = tool_mirror_file_of(other);
  ck_assert_str_ne(f1, f2);
  ck_assert_str_eq(name_in_file(f1), longname);
  ck_assert_str_eq(name_in_file(f2), other);
  ck_assert_str_eq(name_in_file("ns/short"), "ns/short");
  /* A later full state without one of them removes its file. */
  ck_assert_int_eq(full_state(m, r + 1, 2, msg, sizeof msg), 0);
  ck_assert(!exists(f1));
  ck_assert(exists(f2));
  /* Incremental removal by name. */
  mcp_change ch;
  memset(&ch, 0, sizeof ch);
  ch.collection = "c";
  ch.nonce = "2";
  ch.incremental = 1;
  const char *removed[] = {other};
  ch.removed = removed;
  ch.nremoved = 1;
  ck_assert_int_eq(tool_mirror_apply(m, &ch, msg, sizeof msg), 0);
  ck_assert(!exists(f2));
  ck_assert(exists("ns/short"));
  tool_mirror_del(m);
  /* A new run (new mirror on the same directory) keeps the long-named
   * file it writes and sweeps what it does not hold. */
  m = new_mirror();
  ck_assert_int_eq(full_state(m, r + 1, 1, msg, sizeof msg), 0);
  ck_assert(exists(f2));
  ck_assert(!exists("ns/short"));
  tool_mirror_del(m);
  free(f1);
  free(f2);
}
END_TEST

/* ---- bodies (tools/mcp-sink/resource_json.c): the file's "body" ---- */

/* A growable byte string for hand-written protobuf wire bytes: the test
 * writes the bytes itself so that nothing under test builds them. */
typedef struct wbuf {
  uint8_t b[8192];
  size_t n;
} wbuf;

static void put_varint(wbuf *w, uint64_t v) {
  while (v >= 0x80) {
    w->b[w->n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  w->b[w->n++] = (uint8_t)v;
}

static void put_len(wbuf *w, unsigned field, const void *p, size_t n) {
  ck_assert_uint_lt(w->n + n + 12, sizeof w->b);
  put_varint(w, field << 3 | 2);
  put_varint(w, n);
  memcpy(w->b + w->n, p, n);
  w->n += n;
}

/* A Struct entry |key| -> Value |v|, appended to the Struct in |s|. */
static void put_entry(wbuf *s, const char *key, const wbuf *v) {
  wbuf e = {.n = 0};
  put_len(&e, 1, key, strlen(key));
  put_len(&e, 2, v->b, v->n);
  put_len(s, 1, e.b, e.n);
}

static wbuf num_value(double d) {
  wbuf v = {.n = 0};
  put_varint(&v, 2 << 3 | 1);
  memcpy(v.b + v.n, &d, 8);
  v.n += 8;
  return v;
}

static wbuf str_value(const char *s, size_t n) {
  wbuf v = {.n = 0};
  put_len(&v, 3, s, n);
  return v;
}

/* Writes |body| (type |type_url|) as resource "r" and returns the body of
 * the file in compact JSON (caller frees), or NULL with the NACK in |msg|. */
static char *body_of(const char *type_url, const uint8_t *body, size_t len,
                     char *msg, size_t msglen) {
  tool_mirror *m = new_mirror();
  mcp_resource r = res("r", "v1");
  r.type_url = type_url;
  r.body = body;
  r.body_len = len;
  int rv = full_state(m, &r, 1, msg, msglen);
  tool_mirror_del(m);
  if (rv != 0)
    return NULL;
  char path[2048];
  snprintf(path, sizeof path, "%s/c/r.json", dir);
  json_error_t je;
  json_t *doc = json_load_file(path, 0, &je);
  ck_assert_msg(doc != NULL, "%s", je.text);
  char *s = json_dumps(json_object_get(doc, "body"),
                       JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
  json_decref(doc);
  return s;
}

#define STRUCT_URL "type.googleapis.com/google.protobuf.Struct"

START_TEST(test_struct_body_numbers_and_kinds_as_javascript_reads_them) {
  wbuf s = {.n = 0}, v, l = {.n = 0}, lv = {.n = 0}, inner = {.n = 0};
  /* Keys out of order on the wire, and "a" twice: the file keeps the
   * wire order of first appearance, and the last value. */
  v = num_value(1.0);
  put_entry(&s, "z", &v);
  v = num_value(0.1);
  put_entry(&s, "a", &v);
  v = num_value(-0.0);
  put_entry(&s, "c", &v);
  v = num_value(1e15);
  put_entry(&s, "d", &v);
  v = num_value(18014398509481984.0); /* 2^54: whole, beyond 2^53 */
  put_entry(&s, "e", &v);
  v = num_value(1e300);
  put_entry(&s, "f", &v);
  v = num_value(0.0 / 0.0);
  put_entry(&s, "g", &v);
  v = num_value(1.0 / 0.0);
  put_entry(&s, "h", &v);
  v = num_value(-1.0 / 0.0);
  put_entry(&s, "i", &v);
  v.n = 0; /* a Value with no kind */
  put_entry(&s, "j", &v);
  v.n = 0;
  put_varint(&v, 1 << 3); /* null_value */
  put_varint(&v, 0);
  put_entry(&s, "k", &v);
  v = str_value("q\"\n\xc3\xa9", 5);
  put_entry(&s, "l", &v);
  v.n = 0;
  put_varint(&v, 4 << 3); /* bool_value */
  put_varint(&v, 1);
  put_entry(&s, "m", &v);
  /* list_value [-3, "x", {}] */
  v = num_value(-3);
  put_len(&l, 1, v.b, v.n);
  v = str_value("x", 1);
  put_len(&l, 1, v.b, v.n);
  put_len(&lv, 5, inner.b, inner.n);
  put_len(&l, 1, lv.b, lv.n);
  v.n = 0;
  put_len(&v, 6, l.b, l.n);
  put_entry(&s, "n", &v);
  v = num_value(2.5);
  put_entry(&s, "a", &v);
  char msg[512];
  char *got = body_of(STRUCT_URL, s.b, s.n, msg, sizeof msg);
  ck_assert_msg(got != NULL, "%s", msg);
  ck_assert_str_eq(got,
                   "{\"z\":1,\"a\":2.5,\"c\":0,\"d\":1000000000000000,"
                   "\"e\":18014398509481984.0,\"f\":1.0000000000000001e300,"
                   "\"g\":\"NaN\",\"h\":\"Infinity\",\"i\":\"-Infinity\","
                   "\"j\":null,\"k\":null,\"l\":\"q\\\"\\n\xc3\xa9\","
                   "\"m\":true,\"n\":[-3,\"x\",{}]}");
  free(got);
  got = body_of(STRUCT_URL, NULL, 0, msg, sizeof msg);
  ck_assert_str_eq(got, "{}");
  free(got);
}
END_TEST

/* |levels| Structs nested in each other through the key "k". */
static size_t nested(uint8_t *out, size_t cap, int levels) {
  static wbuf a, b;
  a.n = 0;
  for (int i = 1; i < levels; i++) {
    wbuf v = {.n = 0};
    put_len(&v, 5, a.b, a.n);
    b.n = 0;
    put_entry(&b, "k", &v);
    a = b;
  }
  ck_assert_uint_le(a.n, cap);
  memcpy(out, a.b, a.n);
  return a.n;
}

START_TEST(test_struct_body_nesting_bound_is_100_levels_below_the_top) {
  static uint8_t body[8192];
  char msg[512];
  size_t n = nested(body, sizeof body, 101);
  char *got = body_of(STRUCT_URL, body, n, msg, sizeof msg);
  ck_assert_msg(got != NULL, "%s", msg);
  ck_assert_ptr_nonnull(strstr(got, "{\"k\":{\"k\":{}}}"));
  free(got);
  n = nested(body, sizeof body, 102);
  ck_assert_ptr_null(body_of(STRUCT_URL, body, n, msg, sizeof msg));
  ck_assert_str_eq(msg, "resource r: body nests deeper than 100 levels");
}
END_TEST

START_TEST(test_struct_body_that_is_not_one_is_refused_with_a_reason) {
  char msg[512];
  static const uint8_t garbage[] = {0x0a, 0x05, 0x01};
  ck_assert_ptr_null(body_of(STRUCT_URL, garbage, sizeof garbage, msg, sizeof msg));
  ck_assert_msg(strstr(msg, "resource r: body is not a") == msg, "%s", msg);
  wbuf s = {.n = 0}, v = str_value("\xc3(", 2);
  put_entry(&s, "bad", &v);
  ck_assert_ptr_null(body_of(STRUCT_URL, s.b, s.n, msg, sizeof msg));
  ck_assert_msg(strstr(msg, "UTF-8") != NULL, "%s", msg);
}
END_TEST

START_TEST(test_untyped_body_is_padded_base64) {
  char msg[512];
  static const uint8_t b[] = {0xfb, 0xff, 0x00, 'a', 'b'};
  const char *want[] = {"\"\"", "\"+w==\"", "\"+/8=\"", "\"+/8A\"", "\"+/8AYQ==\"",
                        "\"+/8AYWI=\""};
  for (size_t n = 0; n <= sizeof b; n++) {
    char *got = body_of("type.googleapis.com/x.Unknown", b, n, msg, sizeof msg);
    ck_assert_msg(got != NULL, "%s", msg);
    ck_assert_str_eq(got, want[n]);
    free(got);
  }
}
END_TEST

/* create_time of the file: RFC 3339, fractions in 3, 6 or 9 digits. */
static const char *create_time_of(int64_t s, int32_t ns) {
  static char out[64];
  tool_mirror *m = new_mirror();
  mcp_resource r = res("t", "v1");
  r.has_create_time = 1;
  r.create_time_seconds = s;
  r.create_time_nanos = ns;
  char msg[256], path[2048];
  ck_assert_int_eq(full_state(m, &r, 1, msg, sizeof msg), 0);
  tool_mirror_del(m);
  snprintf(path, sizeof path, "%s/c/t.json", dir);
  json_t *doc = json_load_file(path, 0, NULL);
  ck_assert_ptr_nonnull(doc);
  json_t *ct = json_object_get(doc, "create_time");
  snprintf(out, sizeof out, "%s", json_is_null(ct) ? "null" : json_string_value(ct));
  json_decref(doc);
  return out;
}

START_TEST(test_create_time_is_rfc3339_in_utc) {
  ck_assert_str_eq(create_time_of(0, 0), "1970-01-01T00:00:00Z");
  ck_assert_str_eq(create_time_of(1704164645, 500000000), "2024-01-02T03:04:05.500Z");
  ck_assert_str_eq(create_time_of(-1, 1000), "1969-12-31T23:59:59.000001Z");
  ck_assert_str_eq(create_time_of(951782400, 7), "2000-02-29T00:00:00.000000007Z");
  ck_assert_str_eq(create_time_of(-62135596800LL, 0), "0001-01-01T00:00:00Z");
  ck_assert_str_eq(create_time_of(253402300799LL, 999999999),
                   "9999-12-31T23:59:59.999999999Z");
  ck_assert_str_eq(create_time_of(253402300800LL, 0), "null");
  ck_assert_str_eq(create_time_of(-62135596801LL, 0), "null");
  ck_assert_str_eq(create_time_of(0, -1), "null");
  ck_assert_str_eq(create_time_of(0, 1000000000), "null");
}
END_TEST

int main(void) {
  Suite *s = suite_create("tools_mirror");
  TCase *t = tcase_create("names");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, test_mirror_short_segments_keep_their_names);
  tcase_add_test(t, test_mirror_long_segment_is_prefix_tilde_sha256);
  tcase_add_test(t, test_mirror_mapped_prefix_does_not_cut_a_utf8_character);
  tcase_add_test(t, test_mirror_writes_a_251_byte_segment_instead_of_nacking);
  suite_add_tcase(s, t);
  TCase *b = tcase_create("bodies");
  tcase_add_checked_fixture(b, setup, teardown);
  tcase_add_test(b, test_struct_body_numbers_and_kinds_as_javascript_reads_them);
  tcase_add_test(b, test_struct_body_nesting_bound_is_100_levels_below_the_top);
  tcase_add_test(b, test_struct_body_that_is_not_one_is_refused_with_a_reason);
  tcase_add_test(b, test_untyped_body_is_padded_base64);
  tcase_add_test(b, test_create_time_is_rfc3339_in_utc);
  suite_add_tcase(s, b);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
