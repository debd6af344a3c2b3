/*
 * From a file to the store (issue 25, target 2): one file renamed into
 * place in a directory of 20,000 files, seen by mcp-source's watcher
 * (inotify, tools/mcp-source/watch.c), read alone by
 * mcpcfg_loader_update() and applied to an mcp_store (upserts of what
 * changed), on one thread as mcp-source --transport h2c does. Against it,
 * in the same run, what every change cost before: a walk of the directory
 * (mcpcfg_loader_scan(): a stat per file) and its apply.
 *
 *   bench_watch [--quick] [--files N] [--changes N] [--walks N]
 *
 * The workload: N files (default 20,000; --quick 2,000) of one document
 * each, 20 kinds of example.com/v1 (20 collections), a 1 KiB spec. A
 * change rewrites one file beside the tree and renames it over its old
 * name; its time runs from the rename to the store's update.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "bench_util.h"
#include "loader/config_internal.h"
#include "mcp-source/watch.h"

#define NCOLL 20

typedef struct run {
  mcpcfg_loader *loader;
  mcp_store *store;
  int done;  /* the change reached the store */
  int walks; /* batches that asked for a walk (none expected) */
  int rv;
} run;

static void die(const char *what) {
  fprintf(stderr, "bench_watch: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void write_doc(const char *path, int i, int rev) {
  FILE *f = fopen(path, "w");
  if (!f)
    die(path);
  fprintf(f,
          "apiVersion: example.com/v1\nkind: Kind%02d\nmetadata:\n"
          "  name: r%06d\n  namespace: bench\nspec:\n  rev: %d\n  pad: \"",
          i % NCOLL, i, rev);
  for (int k = 0; k < 1000; k++)
    fputc('a' + (i + k) % 26, f);
  fputs("\"\n", f);
  if (fclose(f) != 0)
    die(path);
}

static void on_batch(const char *const *paths, size_t n, int rescan,
                     void *ud) {
  run *r = ud;
  if (rescan) {
    r->walks++;
    r->rv = mcpcfg_loader_scan(r->loader);
  } else if (n) {
    r->rv = mcpcfg_loader_update(r->loader, paths, n);
  } else {
    return;
  }
  if (r->rv > 0)
    r->rv = mcpcfg_loader_apply(r->loader, r->store, 1);
  r->done = 1;
}

static double pct(double *v, size_t n, double p) {
  /* v sorted by bu_median() */
  size_t k = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
  return v[k < n ? k : n - 1];
}

int main(int argc, char **argv) {
  int nfiles = 20000, changes = 200, walk_changes = 20;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      nfiles = 2000;
      changes = 20;
      walk_changes = 5;
    } else if (!strcmp(argv[i], "--files") && i + 1 < argc) {
      nfiles = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--changes") && i + 1 < argc) {
      changes = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--walks") && i + 1 < argc) {
      walk_changes = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: bench_watch [--quick] [--files N] "
                      "[--changes N] [--walks N]\n");
      return 2;
    }
  }
  if (nfiles < 1 || changes < 1 || walk_changes < 1)
    return 2;
  char root[] = "/tmp/mcp-bench-watch-XXXXXX";
  if (!mkdtemp(root))
    die("mkdtemp");
  char dir[64], stage[64], path[128], staged[128];
  snprintf(dir, sizeof dir, "%s/config", root);
  snprintf(stage, sizeof stage, "%s/stage", root);
  if (mkdir(dir, 0755) != 0 || mkdir(stage, 0755) != 0)
    die("mkdir");
  for (int i = 0; i < nfiles; i++) {
    snprintf(path, sizeof path, "%s/r%06d.yaml", dir, i);
    write_doc(path, i, 0);
  }

  run r = {0};
  mcpcfg_options lo;
  mcpcfg_options_default(&lo);
  mcp_store_options so;
  mcp_store_options_default(&so);
  so.epoch = 1; /* fixed: versions need no uniqueness here */
  if (mcpcfg_loader_new(&r.loader, dir, &lo) < 0 ||
      mcp_store_new(&r.store, &so) < 0)
    die("setup");
  /* The files were all written a moment ago: without this, every walk
   * would read them all again (the racy-read rule, loader.h), which a
   * directory older than 2 s does not do. */
  mcpcfg_loader_set_racy_ns(r.loader, 0);
  bu_sw sw = bu_sw_start();
  if (mcpcfg_loader_scan(r.loader) < 0 ||
      mcpcfg_loader_apply(r.loader, r.store, 1) < 0)
    die("first load");
  bu_note("%d files loaded into the store in %.0f ms", nfiles,
          bu_sw_ns(&sw, NULL) / 1e6);

  uv_loop_t loop;
  uv_loop_init(&loop);
  tool_watch *w;
  if (tool_watch_new(&w, &loop, dir, 1000, on_batch, &r) != 0)
    die("inotify");
  tool_watch_sync(w);

  /* The watcher's path: rename -> inotify -> update -> store. */
  double *lat = calloc((size_t)changes, sizeof *lat);
  double *cpu = calloc((size_t)changes, sizeof *cpu);
  if (!lat || !cpu)
    die("calloc");
  for (int c = 0; c < changes; c++) {
    int i = (c * 7919) % nfiles;
    snprintf(path, sizeof path, "%s/r%06d.yaml", dir, i);
    snprintf(staged, sizeof staged, "%s/r%06d.yaml", stage, i);
    write_doc(staged, i, c + 1);
    r.done = 0;
    sw = bu_sw_start();
    if (rename(staged, path) != 0)
      die("rename");
    while (!r.done)
      uv_run(&loop, UV_RUN_ONCE);
    lat[c] = bu_sw_ns(&sw, &cpu[c]) / 1e3;
    cpu[c] /= 1e3;
    if (r.rv < 0) {
      fprintf(stderr, "bench_watch: update: %s\n", mcpcfg_strerror(r.rv));
      return 1;
    }
  }
  /* The same change through a walk of the directory. */
  double *wlat = calloc((size_t)walk_changes, sizeof *wlat);
  if (!wlat)
    die("calloc");
  for (int c = 0; c < walk_changes; c++) {
    int i = (c * 104729 + 1) % nfiles;
    snprintf(path, sizeof path, "%s/r%06d.yaml", dir, i);
    snprintf(staged, sizeof staged, "%s/r%06d.yaml", stage, i);
    write_doc(staged, i, changes + c + 1);
    if (rename(staged, path) != 0)
      die("rename");
    sw = bu_sw_start();
    if (mcpcfg_loader_scan(r.loader) != 1 ||
        mcpcfg_loader_apply(r.loader, r.store, 1) < 1)
      die("scan");
    wlat[c] = bu_sw_ns(&sw, NULL) / 1e3;
  }
  /* Drain the watcher's events of those renames (they change nothing). */
  r.done = 0;
  uv_run(&loop, UV_RUN_NOWAIT);
  tool_watch_close(w);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);

  double med = bu_median(lat, (size_t)changes);
  double p99 = pct(lat, (size_t)changes, 99);
  double cmed = bu_median(cpu, (size_t)changes);
  double wmed = bu_median(wlat, (size_t)walk_changes);
  bu_note("%d changes, one file each, in a directory of %d files; %d walks "
          "asked for (0 expected)", changes, nfiles, r.walks);
  bu_result("watch_file_to_store_p50_us", med, "us",
            "rename into place -> inotify -> that file read -> store "
            "updated, p50", "< 1000", med < 1000);
  bu_result("watch_file_to_store_p99_us", p99, "us", "the same, p99", NULL,
            -1);
  bu_result("watch_file_to_store_cpu_p50_us", cmed, "us",
            "the same, CPU time of the thread, p50", NULL, -1);
  bu_result("watch_walk_to_store_p50_us", wmed, "us",
            "the same change found by a walk of the directory (what every "
            "event cost before), p50", NULL, -1);
  bu_result("watch_walk_vs_file_x", wmed / med, "x",
            "walk / watched file, same run", NULL, -1);
  bu_table("One changed file to the store");

  mcpcfg_loader_del(r.loader);
  mcp_store_del(r.store);
  free(lat);
  free(cpu);
  free(wlat);
  for (int i = 0; i < nfiles; i++) {
    snprintf(path, sizeof path, "%s/r%06d.yaml", dir, i);
    unlink(path);
  }
  rmdir(dir);
  rmdir(stage);
  rmdir(root);
  return r.walks ? 1 : 0;
}
