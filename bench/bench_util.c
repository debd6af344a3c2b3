#include "bench_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t bu_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t bu_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

bu_sw bu_sw_start(void) {
  bu_sw sw;
  sw.cpu = bu_cpu_ns();
  sw.wall = bu_now_ns();
  return sw;
}

double bu_sw_ns(const bu_sw *sw, double *cpu) {
  uint64_t w = bu_now_ns(), c = bu_cpu_ns();
  if (cpu) {
    *cpu = (double)(c - sw->cpu);
  }
  return (double)(w - sw->wall);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double bu_median(double *v, size_t n) {
  if (!n) {
    return 0;
  }
  qsort(v, n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double bu_min(const double *v, size_t n) {
  double m = n ? v[0] : 0;
  for (size_t i = 1; i < n; ++i) {
    m = v[i] < m ? v[i] : m;
  }
  return m;
}

double bu_max(const double *v, size_t n) {
  double m = n ? v[0] : 0;
  for (size_t i = 1; i < n; ++i) {
    m = v[i] > m ? v[i] : m;
  }
  return m;
}

void bu_note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("# ", stdout);
  vprintf(fmt, ap);
  fputc('\n', stdout);
  va_end(ap);
  fflush(stdout);
}

typedef struct row {
  char name[64];
  double value;
  char unit[24];
  char what[96];
  char target[24];
  int verdict;
} row;

static row *rows;
static size_t nrows, caprows;

static void copy(char *dst, size_t n, const char *src) {
  snprintf(dst, n, "%s", src ? src : "");
}

static void print_value(char *buf, size_t n, double v) {
  double a = fabs(v);
  if (a != 0 && a < 10) {
    snprintf(buf, n, "%.3f", v);
  } else if (a < 1000) {
    snprintf(buf, n, "%.1f", v);
  } else {
    snprintf(buf, n, "%.0f", v);
  }
}

void bu_result(const char *name, double value, const char *unit,
               const char *what, const char *target, int verdict) {
  char v[48];
  print_value(v, sizeof(v), value);
  printf("BENCH %s %s %s\n", name, v, unit);
  fflush(stdout);
  if (nrows == caprows) {
    size_t cap = caprows ? caprows * 2 : 32;
    row *r = realloc(rows, cap * sizeof(*r));
    if (!r) {
      return; /* the BENCH line is out; the table loses a row */
    }
    rows = r;
    caprows = cap;
  }
  row *r = &rows[nrows++];
  copy(r->name, sizeof(r->name), name);
  r->value = value;
  copy(r->unit, sizeof(r->unit), unit);
  copy(r->what, sizeof(r->what), what);
  copy(r->target, sizeof(r->target), target);
  r->verdict = target ? verdict : -1;
}

void bu_table(const char *title) {
  printf("\n%s\n\n", title);
  printf("%-44s %14s %-16s %-10s %-7s %s\n", "name", "value", "unit", "target",
         "holds", "what");
  for (int i = 0; i < 124; ++i) {
    putchar('-');
  }
  putchar('\n');
  for (size_t i = 0; i < nrows; ++i) {
    const row *r = &rows[i];
    char v[48];
    print_value(v, sizeof(v), r->value);
    printf("%-44s %14s %-16s %-10s %-7s %s\n", r->name, v, r->unit,
           r->target[0] ? r->target : "-",
           r->verdict < 0 ? "-" : r->verdict ? "yes" : "NO", r->what);
  }
  putchar('\n');
  fflush(stdout);
}

size_t bu_missed(void) {
  size_t n = 0;
  for (size_t i = 0; i < nrows; ++i) {
    n += rows[i].verdict == 0;
  }
  return n;
}

/* ---- counting allocator ---- */

#define HDR 16 /* keeps the 16-byte alignment malloc gives */

size_t bu_glibc_chunk(size_t n) {
  size_t c = (n + 8 + 15) & ~(size_t)15;
  return c < 32 ? 32 : c;
}

static void account(bu_count_mem *c, size_t n, int sign) {
  if (sign > 0) {
    c->live_bytes += n;
    c->live_blocks++;
    c->chunk_bytes += bu_glibc_chunk(n);
    if (c->live_bytes > c->peak_bytes) {
      c->peak_bytes = c->live_bytes;
    }
  } else {
    c->live_bytes -= n;
    c->live_blocks--;
    c->chunk_bytes -= bu_glibc_chunk(n);
  }
}

static void *cm_malloc(size_t n, void *ud) {
  bu_count_mem *c = ud;
  unsigned char *p = malloc(n + HDR);
  if (!p) {
    return NULL;
  }
  memcpy(p, &n, sizeof(n));
  c->allocs++;
  account(c, n, 1);
  return p + HDR;
}

static void cm_free(void *q, void *ud) {
  bu_count_mem *c = ud;
  if (!q) {
    return;
  }
  unsigned char *p = (unsigned char *)q - HDR;
  size_t n;
  memcpy(&n, p, sizeof(n));
  account(c, n, -1);
  free(p);
}

static void *cm_calloc(size_t a, size_t b, void *ud) {
  if (b && a > (SIZE_MAX - HDR) / b) {
    return NULL;
  }
  void *p = cm_malloc(a * b, ud);
  if (p) {
    memset(p, 0, a * b);
  }
  return p;
}

static void *cm_realloc(void *q, size_t n, void *ud) {
  bu_count_mem *c = ud;
  if (!q) {
    return cm_malloc(n, ud);
  }
  unsigned char *p = (unsigned char *)q - HDR;
  size_t old;
  memcpy(&old, p, sizeof(old));
  unsigned char *r = realloc(p, n + HDR);
  if (!r) {
    return NULL;
  }
  account(c, old, -1);
  account(c, n, 1);
  memcpy(r, &n, sizeof(n));
  return r + HDR;
}

void bu_count_mem_init(bu_count_mem *c) {
  memset(c, 0, sizeof(*c));
  c->mem.user_data = c;
  c->mem.malloc = cm_malloc;
  c->mem.free = cm_free;
  c->mem.calloc = cm_calloc;
  c->mem.realloc = cm_realloc;
}

void bu_fill(uint8_t *p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (uint8_t)('a' + (x >> 32) % 26); /* printable, like YAML/JSON */
  }
}
