/*
 * The core is a pure state machine (docs: DESIGN section 3, mcp.h): it
 * includes no socket, thread, time or file header, and calls no clock, file,
 * thread or allocator function directly; all allocation goes through the
 * mcp_mem hook (core/engine/mem.c is the one place that calls the C library's
 * allocator, for the default hook).
 *
 * A textual scan of every C file under core/. The source
 * root comes from MESON_SOURCE_ROOT when set, else from __FILE__ (relative
 * to the build directory, where `meson test` runs tests), else from the
 * working directory and its parents.
 */
#include <check.h>
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAXPATH 4096
#define REPORT 8192

static const char *const BANNED_HEADERS[] = {
    "sys/socket.h", "netdb.h",    "pthread.h",   "threads.h",    "time.h",
    "sys/time.h",   "stdio.h",    "fcntl.h",     "unistd.h",     "dirent.h",
    "sys/stat.h",   "poll.h",     "sys/epoll.h", "signal.h",     "sys/select.h",
    "sys/un.h",     "sys/mman.h", "sys/ioctl.h", "sys/file.h",   "sys/random.h",
    "sched.h",      "semaphore.h", "sys/wait.h", "sys/event.h",  NULL};
static const char *const BANNED_PREFIXES[] = {"netinet/", "arpa/", NULL};

/* Called directly, these bypass the hooks or do I/O. */
static const char *const BANNED_CALLS[] = {
    "malloc", "calloc", "realloc", "free", "strdup", "strndup",
    "aligned_alloc", "posix_memalign", "valloc", "memalign",
    "clock_gettime", "gettimeofday", "time", "clock", "timespec_get",
    "fopen", "fclose", "fread", "fwrite", "fprintf", "printf", "puts",
    "fputs", "perror", "open", "close", "read", "write", "socket", "connect",
    "bind", "listen", "accept", "poll", "select", "epoll_wait", "sleep",
    "usleep", "nanosleep", "rand", "srand", "random", "getrandom", "getenv",
    "exit", "abort", "signal", "raise", "opendir", "stat", "mmap", NULL};
static const char *const BANNED_CALL_PREFIXES[] = {"pthread_", "thrd_", "mtx_",
                                                   "cnd_", NULL};
/* mem.c implements the default hook with these. */
static const char *const MEM_C_ALLOWED[] = {"malloc", "calloc", "realloc",
                                            "free", NULL};

static int in_list(const char *const *list, const char *s) {
  for (size_t i = 0; list[i]; ++i) {
    if (strcmp(list[i], s) == 0) {
      return 1;
    }
  }
  return 0;
}

static int has_prefix_in(const char *const *list, const char *s) {
  for (size_t i = 0; list[i]; ++i) {
    if (strncmp(s, list[i], strlen(list[i])) == 0) {
      return 1;
    }
  }
  return 0;
}

/* ---- the scanner, on a text in memory ---- */

typedef struct report {
  char text[REPORT];
  size_t n;
  int count;
} report;

static void add(report *r, const char *file, int line, const char *what,
                const char *name) {
  r->count++;
  int k = snprintf(r->text + r->n, REPORT - r->n, "\n  %s:%d: %s %s", file,
                   line, what, name);
  if (k > 0 && r->n + (size_t)k < REPORT) {
    r->n += (size_t)k;
  }
}

/*
 * Blanks comments (both kinds), and, when |strings|, string and character
 * literals too; newlines are kept so that line numbers stay right.
 */
static void blank(char *s, int strings) {
  enum { CODE, BLOCK, LINE, STR, CHR } st = CODE;
  for (char *p = s; *p; ++p) {
    switch (st) {
    case CODE:
      if (p[0] == '/' && p[1] == '*') {
        st = BLOCK;
        p[0] = p[1] = ' ';
        ++p;
      } else if (p[0] == '/' && p[1] == '/') {
        st = LINE;
        p[0] = p[1] = ' ';
        ++p;
      } else if (*p == '"') {
        st = STR;
      } else if (*p == '\'') {
        st = CHR;
      }
      break;
    case BLOCK:
      if (p[0] == '*' && p[1] == '/') {
        p[0] = p[1] = ' ';
        ++p;
        st = CODE;
      } else if (*p != '\n') {
        *p = ' ';
      }
      break;
    case LINE:
      if (*p == '\n') {
        st = CODE;
      } else {
        *p = ' ';
      }
      break;
    case STR:
    case CHR:
      if (*p == '\\' && p[1]) { /* an escape: skip the next character */
        if (strings) {
          p[0] = ' ';
          if (p[1] != '\n') {
            p[1] = ' ';
          }
        }
        ++p;
      } else if (*p == (st == STR ? '"' : '\'')) {
        st = CODE;
      } else if (strings && *p != '\n') {
        *p = ' ';
      }
      break;
    }
  }
}

/* #include lines naming a banned header. */
static void scan_includes(const char *file, const char *text, report *r) {
  char *s = strdup(text);
  ck_assert_ptr_nonnull(s);
  blank(s, 0);
  int line = 1;
  for (char *p = s; *p;) {
    char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    char *q = p;
    while (q < p + len && isspace((unsigned char)*q)) {
      ++q;
    }
    if (q < p + len && *q == '#') {
      ++q;
      while (q < p + len && isspace((unsigned char)*q)) {
        ++q;
      }
      if ((size_t)(p + len - q) > 7 && strncmp(q, "include", 7) == 0) {
        q += 7;
        while (q < p + len && isspace((unsigned char)*q)) {
          ++q;
        }
        if (q < p + len && (*q == '<' || *q == '"')) {
          char close = *q == '<' ? '>' : '"';
          char *start = ++q;
          while (q < p + len && *q != close) {
            ++q;
          }
          char name[256];
          size_t nl = (size_t)(q - start);
          if (nl < sizeof(name)) {
            memcpy(name, start, nl);
            name[nl] = '\0';
            if (in_list(BANNED_HEADERS, name) ||
                has_prefix_in(BANNED_PREFIXES, name)) {
              add(r, file, line, "includes", name);
            }
          }
        }
      }
    }
    if (!eol) {
      break;
    }
    p = eol + 1;
    line++;
  }
  free(s);
}

/* Calls of banned functions: an identifier followed by '(' that is not a
 * member (after '.' or '->') and not part of a longer identifier. The
 * allowed list applies to this file only. */
static void scan_calls(const char *file, const char *text,
                       const char *const *allowed, report *r) {
  char *s = strdup(text);
  ck_assert_ptr_nonnull(s);
  blank(s, 1);
  int line = 1;
  char prev = ' '; /* last non-space character before the identifier */
  for (char *p = s; *p;) {
    if (*p == '\n') {
      line++;
    }
    if (isalpha((unsigned char)*p) || *p == '_') {
      char *start = p;
      while (isalnum((unsigned char)*p) || *p == '_') {
        ++p;
      }
      char name[128];
      size_t nl = (size_t)(p - start);
      char *q = p;
      while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') {
        ++q;
      }
      int member = prev == '.' || prev == '>';
      if (*q == '(' && !member && nl < sizeof(name)) {
        memcpy(name, start, nl);
        name[nl] = '\0';
        if ((in_list(BANNED_CALLS, name) ||
             has_prefix_in(BANNED_CALL_PREFIXES, name)) &&
            !(allowed && in_list(allowed, name))) {
          add(r, file, line, "calls", name);
        }
      }
      prev = 'a';
      continue;
    }
    if (!isspace((unsigned char)*p)) {
      prev = *p;
    }
    ++p;
  }
  free(s);
}

/* ---- the files ---- */

static int is_file(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int is_root(const char *dir) {
  char p[MAXPATH];
  snprintf(p, sizeof(p), "%s/core/mcp/sink.c", dir);
  if (!is_file(p)) {
    return 0;
  }
  snprintf(p, sizeof(p), "%s/core/include/mcp/mcp.h", dir);
  return is_file(p);
}

static void find_root(char *root, size_t n) {
  const char *env = getenv("MESON_SOURCE_ROOT");
  if (env && env[0] && is_root(env)) {
    snprintf(root, n, "%s", env);
    return;
  }
  /* __FILE__ is <root>/tests/test_core_headers.c, maybe relative to the
   * build directory. */
  const char *f = __FILE__;
  const char *suffix = "tests/test_core_headers.c";
  size_t fl = strlen(f), sl = strlen(suffix);
  if (fl >= sl && strcmp(f + fl - sl, suffix) == 0) {
    size_t rl = fl - sl;
    char dir[MAXPATH / 2];
    if (rl == 0) {
      snprintf(dir, sizeof(dir), ".");
    } else {
      snprintf(dir, sizeof(dir), "%.*s", (int)(rl - 1), f);
      if (!dir[0]) {
        snprintf(dir, sizeof(dir), "/");
      }
    }
    if (is_root(dir)) {
      snprintf(root, n, "%s", dir);
      return;
    }
    /* Relative to the build directory: the executable is in
     * <build>/tests/. */
    char exe[MAXPATH / 4];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (el > 0 && dir[0] != '/') {
      exe[el] = '\0';
      for (int k = 0; k < 2; ++k) {
        char *slash = strrchr(exe, '/');
        if (slash) {
          *slash = '\0';
        }
      }
      char cand[MAXPATH / 2];
      snprintf(cand, sizeof(cand), "%s/%.*s", exe, MAXPATH / 8, dir);
      if (is_root(cand)) {
        snprintf(root, n, "%s", cand);
        return;
      }
    }
  }
  static const char *const up[] = {".", "..", "../..", "../../..", NULL};
  for (size_t i = 0; up[i]; ++i) {
    if (is_root(up[i])) {
      snprintf(root, n, "%s", up[i]);
      return;
    }
  }
  ck_abort_msg("cannot find the source root (set MESON_SOURCE_ROOT)");
}

static char *slurp(const char *path) {
  FILE *fp = fopen(path, "rb");
  ck_assert_msg(fp != NULL, "cannot open %s", path);
  fseek(fp, 0, SEEK_END);
  long len = ftell(fp);
  ck_assert_int_ge(len, 0);
  fseek(fp, 0, SEEK_SET);
  char *buf = malloc((size_t)len + 1);
  ck_assert_ptr_nonnull(buf);
  ck_assert_uint_eq(fread(buf, 1, (size_t)len, fp), (size_t)len);
  buf[len] = '\0';
  fclose(fp);
  return buf;
}

typedef struct files {
  char path[128][MAXPATH];
  size_t n;
} files;

/* C sources and headers (version.c.in too), not meson.build. */
static int is_c_text(const char *p) {
  static const char *const ext[] = {".c", ".h", ".c.in", NULL};
  size_t l = strlen(p);
  for (size_t i = 0; ext[i]; ++i) {
    size_t el = strlen(ext[i]);
    if (l >= el && strcmp(p + l - el, ext[i]) == 0) {
      return 1;
    }
  }
  return 0;
}

static void collect(const char *dir, files *fs) {
  DIR *d = opendir(dir);
  ck_assert_msg(d != NULL, "cannot open %s", dir);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') {
      continue;
    }
    char p[MAXPATH];
    snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
    struct stat sb;
    ck_assert_int_eq(stat(p, &sb), 0);
    if (S_ISDIR(sb.st_mode)) {
      collect(p, fs);
    } else if (S_ISREG(sb.st_mode) && is_c_text(p)) {
      ck_assert_uint_lt(fs->n, 128);
      snprintf(fs->path[fs->n++], MAXPATH, "%s", p);
    }
  }
  closedir(d);
}

static files *core_files(void) {
  static files fs;
  char root[MAXPATH / 2], dir[MAXPATH];
  fs.n = 0;
  find_root(root, sizeof(root));
  snprintf(dir, sizeof(dir), "%s/core", root);
  collect(dir, &fs);
  /* What we expect to see at least: the scan must not pass vacuously. */
  static const char *const must[] = {
      "/core/engine/mem.c", "/core/mcp/sink.c", "/core/mcp/source.c",
      "/core/engine/store.c", "/core/include/mcp/mcp.h",
      "/core/destination/destination.c", "/core/dispatcher/dispatcher.c",
      "/core/xds/xds_server.c", "/core/engine/include/mcp/engine.h", NULL};
  for (size_t i = 0; must[i]; ++i) {
    int found = 0;
    for (size_t k = 0; k < fs.n; ++k) {
      size_t pl = strlen(fs.path[k]), ml = strlen(must[i]);
      found |= pl >= ml && strcmp(fs.path[k] + pl - ml, must[i]) == 0;
    }
    ck_assert_msg(found, "%s not found under %s", must[i], root);
  }
  return &fs;
}

static int is_mem_c(const char *path) {
  static const char suffix[] = "/core/engine/mem.c";
  size_t l = strlen(path), sl = sizeof(suffix) - 1;
  return l >= sl && strcmp(path + l - sl, suffix) == 0;
}

/* ---- tests ---- */

START_TEST(core_includes_no_socket_thread_time_or_file_header) {
  files *fs = core_files();
  report r;
  memset(&r, 0, sizeof(r));
  for (size_t i = 0; i < fs->n; ++i) {
    char *text = slurp(fs->path[i]);
    scan_includes(fs->path[i], text, &r);
    free(text);
  }
  ck_assert_msg(r.count == 0, "%d banned include(s) in core/:%s", r.count,
                r.text);
}
END_TEST

START_TEST(core_calls_no_allocator_clock_io_or_thread_function_directly) {
  files *fs = core_files();
  report r;
  memset(&r, 0, sizeof(r));
  for (size_t i = 0; i < fs->n; ++i) {
    char *text = slurp(fs->path[i]);
    scan_calls(fs->path[i], text, is_mem_c(fs->path[i]) ? MEM_C_ALLOWED : NULL,
               &r);
    free(text);
  }
  ck_assert_msg(r.count == 0, "%d banned call(s) in core/:%s", r.count, r.text);
}
END_TEST

/* The scanner does see real calls: mem.c calls the C allocator (allowed
 * there, and only there). */
START_TEST(scanner_sees_the_allocator_calls_in_mem_c) {
  files *fs = core_files();
  int seen = 0;
  for (size_t i = 0; i < fs->n; ++i) {
    if (!is_mem_c(fs->path[i])) {
      continue;
    }
    char *text = slurp(fs->path[i]);
    report r;
    memset(&r, 0, sizeof(r));
    scan_calls(fs->path[i], text, NULL, &r);
    free(text);
    ck_assert_int_ge(r.count, 4); /* malloc, calloc, realloc, free */
    ck_assert_ptr_nonnull(strstr(r.text, "calls malloc"));
    ck_assert_ptr_nonnull(strstr(r.text, "calls free"));
    seen = 1;
  }
  ck_assert_int_eq(seen, 1);
}
END_TEST

/* The scanner flags what it must and nothing else. */
START_TEST(scanner_detects_banned_includes_and_calls) {
  static const char bad[] =
      "#include <stdint.h>\n"
      "#include <sys/socket.h>\n"
      "  #  include \"netinet/in.h\"\n"
      "#include <pthread.h>\n"
      "/* #include <stdio.h> in a comment is fine */\n"
      "// #include <time.h> too\n"
      "static int f(void) {\n"
      "  void *p = malloc(3);\n"
      "  p = m->malloc(3, ud);\n"
      "  p = mcp_mem_malloc(&mem, 3);\n"
      "  const char *s = \"free(p) in a string\";\n"
      "  clock_gettime (CLOCK_MONOTONIC, &t);\n"
      "  pthread_mutex_lock(&mu);\n"
      "  x.free(p);\n"
      "  void *(*realloc)(void *, size_t);\n"
      "  return time(NULL);\n"
      "}\n";
  report r;
  memset(&r, 0, sizeof(r));
  scan_includes("bad.c", bad, &r);
  ck_assert_int_eq(r.count, 3);
  ck_assert_ptr_nonnull(strstr(r.text, "bad.c:2: includes sys/socket.h"));
  ck_assert_ptr_nonnull(strstr(r.text, "bad.c:3: includes netinet/in.h"));
  ck_assert_ptr_nonnull(strstr(r.text, "bad.c:4: includes pthread.h"));
  memset(&r, 0, sizeof(r));
  scan_calls("bad.c", bad, NULL, &r);
  ck_assert_msg(r.count == 4, "%d:%s", r.count, r.text);
  ck_assert_ptr_nonnull(strstr(r.text, "bad.c:8: calls malloc"));
  ck_assert_ptr_nonnull(strstr(r.text, "bad.c:12: calls clock_gettime"));
  ck_assert_ptr_nonnull(strstr(r.text, "bad.c:13: calls pthread_mutex_lock"));
  ck_assert_ptr_nonnull(strstr(r.text, "bad.c:16: calls time"));
  /* With malloc allowed (as in mem.c) it is not reported. */
  memset(&r, 0, sizeof(r));
  scan_calls("bad.c", bad, MEM_C_ALLOWED, &r);
  ck_assert_int_eq(r.count, 3);
}
END_TEST

/* ---- layers (docs/architecture.md, "Layers") ---- */

/*
 * What a file of each layer may include with quotes: the engine's public
 * headers, its own layer's header and private headers (a file in its own
 * folder), its own protocol's generated code, and what the architecture
 * names: MCP over xDS includes MCP's public header (its bodies are MCP
 * Resources). No module reads the engine's internals (engine_int.h).
 * The engine includes no module's header.
 */
typedef struct layer {
  const char *dir;          /* "/core/<dir>/" */
  const char *const *allow; /* besides the engine's public headers */
} layer;

static const char *const ENGINE_PUBLIC[] = {"mcp/engine.h", "mcp/auth.h",
                                            "mcp/pballoc.h", NULL};
static const char *const L_ENGINE[] = {"engine_int.h", "google/", NULL};
static const char *const L_MCP[] = {"mcp/mcp_v1alpha1.h", "codec.h", "mcp/v1alpha1/", "google/",
                                    NULL};
static const char *const L_DEST[] = {"mcp/destination.h", "destination_int.h",
                                     "proxy/destination/", "common/",
                                     "google/", NULL};
static const char *const L_DISP[] = {"mcp/dispatcher.h",
                                     "github.com/docker/swarmkit/", "google/",
                                     NULL};
static const char *const L_XDS[] = {"mcp/xds.h", "xds_int.h",
                                    "mcp/mcp_v1alpha1.h", "google/", NULL};
static const layer LAYERS[] = {{"/core/engine/", L_ENGINE},
                               {"/core/mcp/", L_MCP},
                               {"/core/destination/", L_DEST},
                               {"/core/dispatcher/", L_DISP},
                               {"/core/xds/", L_XDS}};

/* Reports each quoted include of |file| (a file of |l|) that |l| may not
 * have. */
static void scan_layer(const char *file, const char *text, const layer *l,
                       report *r) {
  int line = 1;
  for (const char *p = text; *p; ++p) {
    if (*p == '\n') {
      ++line;
      continue;
    }
    if (p != text && p[-1] != '\n') {
      continue;
    }
    const char *q = p;
    while (*q == ' ' || *q == '\t') {
      ++q;
    }
    if (*q++ != '#') {
      continue;
    }
    while (*q == ' ' || *q == '\t') {
      ++q;
    }
    if (strncmp(q, "include", 7) != 0) {
      continue;
    }
    q += 7;
    while (*q == ' ' || *q == '\t') {
      ++q;
    }
    if (*q != '"' && *q != '<') {
      continue;
    }
    char close = *q == '"' ? '"' : '>';
    const char *name = ++q;
    const char *end = strchr(name, close);
    if (!end || end - name >= 256) {
      continue;
    }
    char inc[256];
    snprintf(inc, sizeof(inc), "%.*s", (int)(end - name), name);
    /* System headers: scan_includes() judges them; mcp/ ones are ours. */
    if (close == '>' && strncmp(inc, "mcp/", 4) != 0) {
      continue;
    }
    int ok = in_list(ENGINE_PUBLIC, inc) || in_list(l->allow, inc) ||
             has_prefix_in(l->allow, inc);
    if (!ok) {
      add(r, file, line, "includes", inc);
    }
  }
}

static const layer *layer_of(const char *path) {
  for (size_t i = 0; i < sizeof(LAYERS) / sizeof(LAYERS[0]); ++i) {
    if (strstr(path, LAYERS[i].dir)) {
      return &LAYERS[i];
    }
  }
  return NULL;
}

START_TEST(each_layer_includes_only_the_engine_and_its_own_headers) {
  files *fs = core_files();
  report r;
  memset(&r, 0, sizeof(r));
  size_t scanned = 0;
  for (size_t i = 0; i < fs->n; ++i) {
    const layer *l = layer_of(fs->path[i]);
    if (!l) {
      continue; /* core/include/mcp/mcp.h: the umbrella includes them all */
    }
    char *text = slurp(fs->path[i]);
    scan_layer(fs->path[i], text, l, &r);
    free(text);
    ++scanned;
  }
  ck_assert_uint_ge(scanned, 40);
  ck_assert_msg(r.count == 0, "%d include(s) across layers:%s", r.count,
                r.text);
}
END_TEST

/* The layer scan flags a module reaching into the engine's or another
 * module's private header, and the engine including a module. */
START_TEST(layer_scan_detects_a_module_reaching_across) {
  static const char disp[] = "#include \"mcp/pballoc.h\"\n"
                             "#include \"mcp/dispatcher.h\"\n"
                             "#include \"engine_int.h\"\n"
                             "#include <mcp/destination.h>\n"
                             "#include <string.h>\n"
                             "#include \"github.com/docker/swarmkit/api/x.h\"\n";
  report r;
  memset(&r, 0, sizeof(r));
  scan_layer("d.c", disp, &LAYERS[3], &r);
  ck_assert_msg(r.count == 2, "%d:%s", r.count, r.text);
  ck_assert_ptr_nonnull(strstr(r.text, "d.c:3: includes engine_int.h"));
  ck_assert_ptr_nonnull(strstr(r.text, "d.c:4: includes mcp/destination.h"));
  static const char eng[] = "#include \"engine_int.h\"\n"
                            "#include \"mcp/mcp_v1alpha1.h\"\n"
                            "#include \"mcp/mcp.h\"\n";
  memset(&r, 0, sizeof(r));
  scan_layer("e.c", eng, &LAYERS[0], &r);
  ck_assert_msg(r.count == 2, "%d:%s", r.count, r.text);
  /* MCP is a module like the others: the store's internals are closed
   * to it too. */
  memset(&r, 0, sizeof(r));
  scan_layer("m.c", "#include \"engine_int.h\"\n", &LAYERS[1], &r);
  ck_assert_msg(r.count == 1, "%d:%s", r.count, r.text);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("core_headers");
  TCase *tc = tcase_create("headers");
  tcase_add_test(tc, core_includes_no_socket_thread_time_or_file_header);
  tcase_add_test(tc, core_calls_no_allocator_clock_io_or_thread_function_directly);
  tcase_add_test(tc, scanner_sees_the_allocator_calls_in_mem_c);
  tcase_add_test(tc, scanner_detects_banned_includes_and_calls);
  tcase_add_test(tc, each_layer_includes_only_the_engine_and_its_own_headers);
  tcase_add_test(tc, layer_scan_detects_a_module_reaching_across);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
