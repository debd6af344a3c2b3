/*
 * Tests of tools/mcp-sink/mirror.c, mcp-sink's --out mirror: file names of long
 * resource name segments (issue 12, point 4). Real files in a temporary
 * directory.
 */
#include <check.h>
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

int main(void) {
  Suite *s = suite_create("tools_mirror");
  TCase *t = tcase_create("names");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, test_mirror_short_segments_keep_their_names);
  tcase_add_test(t, test_mirror_long_segment_is_prefix_tilde_sha256);
  tcase_add_test(t, test_mirror_mapped_prefix_does_not_cut_a_utf8_character);
  tcase_add_test(t, test_mirror_writes_a_251_byte_segment_instead_of_nacking);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
