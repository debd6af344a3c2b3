/* The metrics registry and the Prometheus text format (0.0.4). */
#include "ops/metrics.h"
#include "util/grow.h"
#include "util/utf8.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct series {
  char **values; /* the family's nlabels values */
  double value;  /* counter, gauge */
  uint64_t *counts; /* histogram: nbounds + 1 (non-cumulative) */
  double sum;
  uint64_t count;
} series;

struct ops_metric {
  ops_metrics *m;
  ops_metric_type type;
  char *name, *help;
  char *labels[OPS_METRICS_MAX_LABELS];
  size_t nlabels;
  double *bounds;
  size_t nbounds;
  series *s;
  size_t ns, cap;
  int overflowed; /* the overflow series exists */
};

struct ops_metrics {
  pthread_mutex_t lock;
  char *const_names[OPS_METRICS_MAX_LABELS];
  char *const_values[OPS_METRICS_MAX_LABELS];
  size_t nconst;
  size_t max_series;
  ops_metric **f;
  size_t nf, fcap;
};

/* ---- names ---- */

static int name_ok(const char *s, int colon) {
  if (!s || !*s)
    return 0;
  for (const char *p = s; *p; p++) {
    char c = *p;
    int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                (colon && c == ':');
    if (!alpha && !(p != s && c >= '0' && c <= '9'))
      return 0;
  }
  return 1;
}

static int label_ok(const char *s) {
  return name_ok(s, 0) && strncmp(s, "__", 2) != 0;
}

/* ---- registry ---- */

ops_metrics *ops_metrics_new(void) {
  ops_metrics *m = calloc(1, sizeof(*m));
  if (!m)
    return NULL;
  if (pthread_mutex_init(&m->lock, NULL) != 0) {
    free(m);
    return NULL;
  }
  m->max_series = OPS_METRICS_DEFAULT_MAX_SERIES;
  return m;
}

static void series_free(ops_metric *f, series *s) {
  for (size_t i = 0; s->values && i < f->nlabels; i++)
    free(s->values[i]);
  free(s->values);
  free(s->counts);
}

static void family_free(ops_metric *f) {
  if (!f)
    return;
  for (size_t i = 0; i < f->ns; i++)
    series_free(f, &f->s[i]);
  free(f->s);
  for (size_t i = 0; i < f->nlabels; i++)
    free(f->labels[i]);
  free(f->bounds);
  free(f->name);
  free(f->help);
  free(f);
}

void ops_metrics_del(ops_metrics *m) {
  if (!m)
    return;
  for (size_t i = 0; i < m->nf; i++)
    family_free(m->f[i]);
  free(m->f);
  for (size_t i = 0; i < m->nconst; i++) {
    free(m->const_names[i]);
    free(m->const_values[i]);
  }
  pthread_mutex_destroy(&m->lock);
  free(m);
}

int ops_metrics_const_label(ops_metrics *m, const char *name,
                            const char *value) {
  if (!label_ok(name) || strcmp(name, "le") == 0 || !value ||
      m->nconst == OPS_METRICS_MAX_LABELS || m->nf > 0)
    return -1;
  for (size_t i = 0; i < m->nconst; i++)
    if (strcmp(m->const_names[i], name) == 0)
      return -1;
  char *n = strdup(name), *v = strdup(value);
  if (!n || !v) {
    free(n);
    free(v);
    return -1;
  }
  m->const_names[m->nconst] = n;
  m->const_values[m->nconst++] = v;
  return 0;
}

void ops_metrics_set_max_series(ops_metrics *m, size_t max) {
  pthread_mutex_lock(&m->lock);
  m->max_series = max ? max : OPS_METRICS_DEFAULT_MAX_SERIES;
  pthread_mutex_unlock(&m->lock);
}

/* Adds a series (lock held). NULL when out of memory. */
static series *series_add(ops_metric *f, const char *const *values) {
  series *v = tool_grow(f->s, f->ns, &f->cap, sizeof(*v), 4);
  if (!v)
    return NULL;
  f->s = v;
  series *s = &f->s[f->ns];
  memset(s, 0, sizeof(*s));
  if (f->nlabels) {
    s->values = calloc(f->nlabels, sizeof(*s->values));
    if (!s->values)
      return NULL;
    for (size_t i = 0; i < f->nlabels; i++) {
      s->values[i] = strdup(values[i] ? values[i] : "");
      if (!s->values[i]) {
        series_free(f, s);
        return NULL;
      }
    }
  }
  if (f->type == OPS_HISTOGRAM) {
    s->counts = calloc(f->nbounds + 1, sizeof(*s->counts));
    if (!s->counts) {
      series_free(f, s);
      return NULL;
    }
  }
  f->ns++;
  return s;
}

static ops_metric *family_add(ops_metrics *m, ops_metric_type type,
                              const char *name, const char *help,
                              const char *const *labels, size_t nlabels,
                              const double *bounds, size_t nbounds) {
  if (!m || !name_ok(name, 1) || nlabels + m->nconst > OPS_METRICS_MAX_LABELS ||
      (nlabels && !labels))
    return NULL;
  for (size_t i = 0; i < nlabels; i++) {
    if (!label_ok(labels[i]) ||
        (type == OPS_HISTOGRAM && strcmp(labels[i], "le") == 0))
      return NULL;
    for (size_t j = 0; j < i; j++)
      if (strcmp(labels[i], labels[j]) == 0)
        return NULL;
    for (size_t j = 0; j < m->nconst; j++)
      if (strcmp(labels[i], m->const_names[j]) == 0)
        return NULL;
  }
  if (type == OPS_HISTOGRAM) {
    if (nbounds && !bounds)
      return NULL;
    for (size_t i = 0; i < nbounds; i++)
      if (!isfinite(bounds[i]) || (i && !(bounds[i] > bounds[i - 1])))
        return NULL;
  }
  ops_metric *f = calloc(1, sizeof(*f));
  if (!f)
    return NULL;
  f->m = m;
  f->type = type;
  f->name = strdup(name);
  f->help = strdup(help ? help : "");
  int ok = f->name && f->help;
  for (size_t i = 0; ok && i < nlabels; i++) {
    f->labels[i] = strdup(labels[i]);
    ok = f->labels[i] != NULL;
    f->nlabels = i + 1;
  }
  if (ok && type == OPS_HISTOGRAM && nbounds) {
    f->bounds = malloc(nbounds * sizeof(*f->bounds));
    ok = f->bounds != NULL;
    if (ok)
      memcpy(f->bounds, bounds, nbounds * sizeof(*bounds));
    f->nbounds = nbounds;
  }
  if (ok && nlabels == 0)
    ok = series_add(f, NULL) != NULL;
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; ok && i < m->nf; i++)
    ok = strcmp(m->f[i]->name, name) != 0;
  if (ok) {
    ops_metric **nf = tool_grow(m->f, m->nf, &m->fcap, sizeof(*nf), 16);
    ok = nf != NULL;
    if (ok)
      m->f = nf;
  }
  if (ok)
    m->f[m->nf++] = f;
  pthread_mutex_unlock(&m->lock);
  if (!ok) {
    family_free(f);
    return NULL;
  }
  return f;
}

ops_metric *ops_metrics_counter(ops_metrics *m, const char *name,
                                const char *help, const char *const *labels,
                                size_t nlabels) {
  return family_add(m, OPS_COUNTER, name, help, labels, nlabels, NULL, 0);
}

ops_metric *ops_metrics_gauge(ops_metrics *m, const char *name,
                              const char *help, const char *const *labels,
                              size_t nlabels) {
  return family_add(m, OPS_GAUGE, name, help, labels, nlabels, NULL, 0);
}

ops_metric *ops_metrics_histogram(ops_metrics *m, const char *name,
                                  const char *help, const char *const *labels,
                                  size_t nlabels, const double *bounds,
                                  size_t nbounds) {
  return family_add(m, OPS_HISTOGRAM, name, help, labels, nlabels, bounds,
                    nbounds);
}

/* ---- updates ---- */

static int values_equal(const ops_metric *f, const series *s,
                        const char *const *values) {
  for (size_t i = 0; i < f->nlabels; i++)
    if (strcmp(s->values[i], values[i] ? values[i] : "") != 0)
      return 0;
  return 1;
}

/* The series of |values| (lock held), created when |create|; the overflow
 * series beyond max_series. NULL: none (or out of memory). */
static series *series_get(ops_metric *f, const char *const *values,
                          int create) {
  if (f->nlabels == 0)
    return &f->s[0];
  for (size_t i = 0; i < f->ns; i++)
    if (values_equal(f, &f->s[i], values))
      return &f->s[i];
  if (!create)
    return NULL;
  if (f->ns < f->m->max_series)
    return series_add(f, values);
  const char *other[OPS_METRICS_MAX_LABELS];
  for (size_t i = 0; i < f->nlabels; i++)
    other[i] = OPS_METRICS_OVERFLOW;
  if (f->overflowed) {
    for (size_t i = 0; i < f->ns; i++)
      if (values_equal(f, &f->s[i], other))
        return &f->s[i];
  }
  series *s = series_add(f, other);
  f->overflowed = s != NULL;
  return s;
}

static void update(ops_metric *f, const char *const *values, double v,
                   int op) {
  if (!f)
    return;
  pthread_mutex_lock(&f->m->lock);
  series *s = series_get(f, values, 1);
  if (s) {
    if (op == 0)
      s->value += v;
    else if (op == 1)
      s->value = v;
    else {
      size_t b = 0;
      while (b < f->nbounds && v > f->bounds[b])
        b++;
      s->counts[b]++;
      s->sum += v;
      s->count++;
    }
  }
  pthread_mutex_unlock(&f->m->lock);
}

void ops_metric_add(ops_metric *f, const char *const *values, double v) {
  if (!f || f->type == OPS_HISTOGRAM || isnan(v) ||
      (f->type == OPS_COUNTER && !(v >= 0)))
    return;
  update(f, values, v, 0);
}

void ops_metric_set(ops_metric *f, const char *const *values, double v) {
  if (!f || f->type != OPS_GAUGE)
    return;
  update(f, values, v, 1);
}

void ops_metric_observe(ops_metric *f, const char *const *values, double v) {
  if (!f || f->type != OPS_HISTOGRAM || isnan(v))
    return;
  update(f, values, v, 2);
}

double ops_metric_value(ops_metric *f, const char *const *values) {
  if (!f)
    return 0;
  pthread_mutex_lock(&f->m->lock);
  series *s = series_get(f, values, 0);
  double v = !s ? 0 : f->type == OPS_HISTOGRAM ? (double)s->count : s->value;
  pthread_mutex_unlock(&f->m->lock);
  return v;
}

/* ---- rendering ---- */

const char *ops_metrics_format_double(double v, char *buf, size_t len) {
  if (isnan(v))
    snprintf(buf, len, "NaN");
  else if (isinf(v))
    snprintf(buf, len, v > 0 ? "+Inf" : "-Inf");
  else if (v == floor(v) && fabs(v) < 9007199254740992.0)
    snprintf(buf, len, "%.0f", v == 0 ? 0.0 : v); /* no "-0" */
  else {
    for (int prec = 15; prec <= 17; prec++) {
      snprintf(buf, len, "%.*g", prec, v);
      if (strtod(buf, NULL) == v)
        break;
    }
  }
  return buf;
}

/* |s| escaped: backslash and newline always, double quotes when |quote|;
 * invalid UTF-8 as U+FFFD. */
static void escape(ops_buf *out, const char *s, int quote) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s);
  while (n > 0) {
    size_t run = 0;
    while (run < n && p[run] >= 0x20 && p[run] < 0x80 && p[run] != '\\' &&
           p[run] != '"')
      run++;
    ops_buf_add(out, p, run);
    p += run;
    n -= run;
    if (n == 0)
      break;
    size_t l;
    if (*p == '\\') {
      ops_buf_str(out, "\\\\");
      l = 1;
    } else if (*p == '\n') {
      ops_buf_str(out, "\\n");
      l = 1;
    } else if (*p == '"') {
      ops_buf_str(out, quote ? "\\\"" : "\"");
      l = 1;
    } else if (*p < 0x80) {
      ops_buf_add(out, p, 1); /* other control characters pass */
      l = 1;
    } else if ((l = mcp_utf8_len(p, n)) > 0) {
      ops_buf_add(out, p, l);
    } else {
      ops_buf_str(out, "\xef\xbf\xbd");
      l = 1;
    }
    p += l;
    n -= l;
  }
}

/* {const labels, the series' labels[, le="..."]} */
static void labels_out(ops_buf *out, const ops_metrics *m,
                       const ops_metric *f, const series *s, const char *le) {
  size_t n = m->nconst + f->nlabels + (le ? 1 : 0);
  if (n == 0)
    return;
  ops_buf_add(out, "{", 1);
  size_t k = 0;
  for (size_t i = 0; i < m->nconst; i++, k++) {
    ops_buf_printf(out, "%s%s=\"", k ? "," : "", m->const_names[i]);
    escape(out, m->const_values[i], 1);
    ops_buf_add(out, "\"", 1);
  }
  for (size_t i = 0; i < f->nlabels; i++, k++) {
    ops_buf_printf(out, "%s%s=\"", k ? "," : "", f->labels[i]);
    escape(out, s->values[i], 1);
    ops_buf_add(out, "\"", 1);
  }
  if (le)
    ops_buf_printf(out, "%sle=\"%s\"", k ? "," : "", le);
  ops_buf_add(out, "}", 1);
}

static void sample(ops_buf *out, const ops_metrics *m, const ops_metric *f,
                   const series *s, const char *suffix, const char *le,
                   double v) {
  char num[40];
  ops_buf_str(out, f->name);
  ops_buf_str(out, suffix);
  labels_out(out, m, f, s, le);
  ops_buf_printf(out, " %s\n", ops_metrics_format_double(v, num, sizeof(num)));
}

int ops_metrics_render(ops_metrics *m, ops_buf *out) {
  static const char *const type_names[] = {"counter", "gauge", "histogram"};
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->nf; i++) {
    const ops_metric *f = m->f[i];
    ops_buf_printf(out, "# HELP %s ", f->name);
    escape(out, f->help, 0);
    ops_buf_printf(out, "\n# TYPE %s %s\n", f->name, type_names[f->type]);
    for (size_t j = 0; j < f->ns; j++) {
      const series *s = &f->s[j];
      if (f->type != OPS_HISTOGRAM) {
        sample(out, m, f, s, "", NULL, s->value);
        continue;
      }
      uint64_t cum = 0;
      char le[40];
      for (size_t b = 0; b < f->nbounds; b++) {
        cum += s->counts[b];
        ops_metrics_format_double(f->bounds[b], le, sizeof(le));
        sample(out, m, f, s, "_bucket", le, (double)cum);
      }
      sample(out, m, f, s, "_bucket", "+Inf", (double)s->count);
      sample(out, m, f, s, "_sum", NULL, s->sum);
      sample(out, m, f, s, "_count", NULL, (double)s->count);
    }
  }
  pthread_mutex_unlock(&m->lock);
  return out->failed ? -1 : 0;
}
