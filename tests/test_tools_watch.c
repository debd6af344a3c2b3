/*
 * Tests of tools/mcp-source/watch.c, mcp-source's inotify watcher: what a
 * batch of events hands the loader. Real files in a temporary directory,
 * a real libuv loop; the writes are done before the loop runs, so that one
 * read of the inotify queue returns them all (one batch).
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "mcp-source/watch.h"

enum { NFILES = 40 };

typedef struct got {
  int batches, rescans;
  size_t n;
  char *paths[4 * NFILES];
} got;

static void on_batch(const char *const *paths, size_t n, int rescan,
                     void *ud) {
  got *g = ud;
  g->batches++;
  g->rescans += rescan != 0;
  for (size_t i = 0; i < n && g->n < 4 * NFILES; i++)
    g->paths[g->n++] = strdup(paths[i]);
}

static void write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  ck_assert_int_eq(close(fd), 0);
}

/* A watcher of |root| (settling an hour: no settle ticks) on a new loop,
 * synced with the tree. */
static tool_watch *watch_start(uv_loop_t *loop, const char *root, got *g) {
  ck_assert_int_eq(uv_loop_init(loop), 0);
  tool_watch *w = NULL;
  ck_assert_int_eq(tool_watch_new(&w, loop, root, 3600000, on_batch, g), 0);
  tool_watch_sync(w);
  return w;
}

static void watch_stop(tool_watch *w, uv_loop_t *loop) {
  tool_watch_close(w);
  ck_assert_int_eq(uv_run(loop, UV_RUN_DEFAULT), 0);
  ck_assert_int_eq(uv_loop_close(loop), 0);
}

/* Each file closed after writing three times, in descending order, and a
 * file that is not YAML: the batch names each YAML file once, sorted (as
 * mcpcfg_loader_update() takes them: distinct). */
START_TEST(test_batch_names_each_file_once_sorted) {
  char root[] = "/tmp/test_tools_watch.XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(root));
  char ns[64], path[128];
  snprintf(ns, sizeof ns, "%s/ns", root);
  ck_assert_int_eq(mkdir(ns, 0755), 0);
  uv_loop_t loop;
  got g = {0};
  tool_watch *w = watch_start(&loop, root, &g);
  for (int round = 0; round < 3; round++)
    for (int i = NFILES - 1; i >= 0; i--) {
      snprintf(path, sizeof path, "%s/f%02d.yaml", ns, i);
      write_file(path, round ? "kind: X\n" : "kind: Y\n");
    }
  snprintf(path, sizeof path, "%s/notes.txt", ns);
  write_file(path, "not YAML\n");
  while (g.n < NFILES && uv_run(&loop, UV_RUN_ONCE))
    ;
  ck_assert_int_eq(g.batches, 1);
  ck_assert_int_eq(g.rescans, 0);
  ck_assert_uint_eq(g.n, NFILES);
  for (size_t i = 0; i < g.n; i++) {
    snprintf(path, sizeof path, "%s/f%02zu.yaml", ns, i);
    ck_assert_str_eq(g.paths[i], path);
    free(g.paths[i]);
  }
  tool_watch_stats st;
  tool_watch_get_stats(w, &st);
  ck_assert_uint_eq(st.closed, 3 * NFILES);
  ck_assert_uint_eq(st.writing, 0);
  watch_stop(w, &loop);
  for (int i = 0; i < NFILES; i++) {
    snprintf(path, sizeof path, "%s/f%02d.yaml", ns, i);
    unlink(path);
  }
  snprintf(path, sizeof path, "%s/notes.txt", ns);
  unlink(path);
  rmdir(ns);
  rmdir(root);
}
END_TEST

/* A plain tree on a local file system is seen whole; a YAML name that is
 * a symbolic link (its target may be outside) is not, nor a root that is
 * gone; each says why, and a later walk without them is whole again. */
START_TEST(test_blind_names_what_inotify_cannot_see) {
  char root[] = "/tmp/test_tools_watch.XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(root));
  char ns[64], path[128], link[128], buf[160];
  snprintf(ns, sizeof ns, "%s/ns", root);
  ck_assert_int_eq(mkdir(ns, 0755), 0);
  snprintf(path, sizeof path, "%s/a.yaml", ns);
  write_file(path, "kind: X\n");
  uv_loop_t loop;
  got g = {0};
  tool_watch *w = watch_start(&loop, root, &g);
  /* /tmp is a local file system here (ext4 or tmpfs): nothing unseen. */
  ck_assert_ptr_null(tool_watch_blind(w, buf, sizeof buf));

  snprintf(link, sizeof link, "%s/b.yaml", ns);
  ck_assert_int_eq(symlink(path, link), 0);
  tool_watch_sync(w);
  const char *why = tool_watch_blind(w, buf, sizeof buf);
  ck_assert_ptr_nonnull(why);
  ck_assert_ptr_nonnull(strstr(why, "symbolic link"));

  /* A link that is not YAML, or a link to a directory (watched through
   * the link), hides nothing. */
  ck_assert_int_eq(unlink(link), 0);
  snprintf(link, sizeof link, "%s/notes.txt", ns);
  ck_assert_int_eq(symlink(path, link), 0);
  char dlink[128];
  snprintf(dlink, sizeof dlink, "%s/alias", root);
  ck_assert_int_eq(symlink(ns, dlink), 0);
  tool_watch_sync(w);
  ck_assert_ptr_null(tool_watch_blind(w, buf, sizeof buf));
  ck_assert_int_eq(unlink(dlink), 0);
  ck_assert_int_eq(unlink(link), 0);

  /* The root gone: nothing watches for its return. */
  ck_assert_int_eq(unlink(path), 0);
  ck_assert_int_eq(rmdir(ns), 0);
  ck_assert_int_eq(rmdir(root), 0);
  tool_watch_sync(w);
  why = tool_watch_blind(w, buf, sizeof buf);
  ck_assert_ptr_nonnull(why);
  ck_assert_ptr_nonnull(strstr(why, "no inotify watch"));
  ck_assert_int_eq(mkdir(root, 0755), 0);
  tool_watch_sync(w);
  ck_assert_ptr_null(tool_watch_blind(w, buf, sizeof buf));

  watch_stop(w, &loop);
  rmdir(root);
}
END_TEST

/* A tree on a file system not known to be local (procfs here; NFS, CIFS or
 * FUSE in life) can change with no event: the watcher says so, by type. */
START_TEST(test_blind_names_a_file_system_not_known_local) {
  const char *root = "/proc/sys/kernel/random"; /* files only, no links */
  char buf[160];
  uv_loop_t loop;
  got g = {0};
  tool_watch *w = watch_start(&loop, root, &g);
  const char *why = tool_watch_blind(w, buf, sizeof buf);
  ck_assert_ptr_nonnull(why);
  ck_assert_msg(strstr(why, "not known to be local (type 0x9fa0") != NULL, "%s", why);
  watch_stop(w, &loop);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tools_watch");
  TCase *t = tcase_create("batch");
  tcase_add_test(t, test_batch_names_each_file_once_sorted);
  tcase_add_test(t, test_blind_names_what_inotify_cannot_see);
  tcase_add_test(t, test_blind_names_a_file_system_not_known_local);
  suite_add_tcase(s, t);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
