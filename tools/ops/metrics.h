/*
 * A small metrics registry: counters, gauges and histograms with fixed
 * buckets, each a family of series told apart by label values, rendered in
 * the Prometheus text exposition format, version 0.0.4.
 *
 * Thread-safe: updates may come from any thread (the transport's) while
 * another renders (a scrape); one mutex per registry, held for a few
 * comparisons per update.
 *
 * Cardinality is bounded: a family holds at most |max_series| label sets
 * (default 500). Further label sets are counted in one overflow series
 * whose every label value is OPS_METRICS_OVERFLOW ("_other"), so that a
 * peer choosing collection names cannot grow memory or the scrape.
 *
 * Names are checked at registration: metric names [a-zA-Z_:][a-zA-Z0-9_:]*,
 * label names [a-zA-Z_][a-zA-Z0-9_]* not starting with "__" ("le" is
 * reserved for histograms). Label values and help texts are escaped on
 * output (backslash, double quote in values, newline), and bytes that are
 * not UTF-8 are written as U+FFFD.
 */
#ifndef TOOLS_OPS_METRICS_H
#define TOOLS_OPS_METRICS_H

#include <stddef.h>

#include "ops/buf.h"

#define OPS_METRICS_MAX_LABELS 4
#define OPS_METRICS_DEFAULT_MAX_SERIES 500
#define OPS_METRICS_OVERFLOW "_other"
#define OPS_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef enum ops_metric_type {
  OPS_COUNTER = 0,
  OPS_GAUGE = 1,
  OPS_HISTOGRAM = 2
} ops_metric_type;

typedef struct ops_metrics ops_metrics;
typedef struct ops_metric ops_metric; /* one family */

/* NULL when out of memory. */
ops_metrics *ops_metrics_new(void);
/* Frees the registry and its families. NULL is a no-op. */
void ops_metrics_del(ops_metrics *m);

/* A label written first on every sample (e.g. component="mcp-source").
 * At most OPS_METRICS_MAX_LABELS; add them before the families. Returns 0,
 * or -1 for a bad name, too many, or no memory. */
int ops_metrics_const_label(ops_metrics *m, const char *name,
                            const char *value);

/* Most label sets per family (0: the default). */
void ops_metrics_set_max_series(ops_metrics *m, size_t max);

/*
 * Registers a family. |labels|: |nlabels| names (at most
 * OPS_METRICS_MAX_LABELS minus the constant labels). Histograms take
 * |nbounds| finite upper bounds in increasing order (the +Inf bucket is
 * implicit). Names and help are copied. Returns the family (owned by the
 * registry), or NULL for a bad or duplicate name, bad bounds, or no
 * memory. A family without labels has its one series from the start (it
 * is written as 0 before any update); labelled series appear on their
 * first update.
 */
ops_metric *ops_metrics_counter(ops_metrics *m, const char *name,
                                const char *help, const char *const *labels,
                                size_t nlabels);
ops_metric *ops_metrics_gauge(ops_metrics *m, const char *name,
                              const char *help, const char *const *labels,
                              size_t nlabels);
ops_metric *ops_metrics_histogram(ops_metrics *m, const char *name,
                                  const char *help, const char *const *labels,
                                  size_t nlabels, const double *bounds,
                                  size_t nbounds);

/*
 * Updates the series of |values| (the family's |nlabels| label values; NULL
 * when it has none). A NULL family is a no-op (so that a failed
 * registration does not need checks at every update).
 *   add: counter (|v| >= 0, else ignored) or gauge;
 *   set: gauge;
 *   observe: histogram (NaN is ignored).
 * An update of the wrong type is ignored. Out of memory: the update is
 * lost (counted nowhere).
 */
void ops_metric_add(ops_metric *f, const char *const *values, double v);
void ops_metric_set(ops_metric *f, const char *const *values, double v);
void ops_metric_observe(ops_metric *f, const char *const *values, double v);
#define ops_metric_inc(f, values) ops_metric_add((f), (values), 1.0)

/* The value of a series (a histogram's count), 0 when it does not exist.
 * For tests. */
double ops_metric_value(ops_metric *f, const char *const *values);

/* Appends every family, in registration order, series in creation order.
 * Returns 0, or -1 when |out| failed (out of memory). */
int ops_metrics_render(ops_metrics *m, ops_buf *out);

/* Formats |v| as the exposition format writes numbers ("NaN", "+Inf",
 * "-Inf", integers without exponent below 2^53, else the shortest "%g"
 * that reads back the same). |buf| holds at least 32 bytes. */
const char *ops_metrics_format_double(double v, char *buf, size_t len);

#endif /* TOOLS_OPS_METRICS_H */
