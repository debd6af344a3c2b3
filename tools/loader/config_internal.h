/* Shared between the parts of mcpcfg; not for the programs. */
#ifndef MCPCFG_CONFIG_INTERNAL_H
#define MCPCFG_CONFIG_INTERNAL_H

#include "loader/loader.h"

/*
 * One resource, from one document. A single malloc block holds it and all
 * it points to (a typed body's type_url too; a Struct's is static), so it
 * is freed in one call.
 * Reference counted: a file keeps the documents of its last good content
 * across scans, and an old and a new view of the same file may share them.
 */
typedef struct mcpcfg_doc {
  int refs;
  int dup_reported;   /* this document lost a duplicate and was reported */
  unsigned long line; /* of the document start, for reports */
  const char *collection;
  mcp_resource res;
  char *text; /* opts.keep_text: the document's bytes in its file */
  size_t text_len;
} mcpcfg_doc;

void mcpcfg_doc_unref(mcpcfg_doc *doc);
/* Drops a reference to each of |docs[0..n)| and frees the array. */
void mcpcfg_docs_free(mcpcfg_doc **docs, size_t n);

/*
 * Parses the YAML bytes of one file into documents, reporting each skipped
 * document. Returns 0 with |*pdocs| (a malloc'd array of references owned by
 * the caller, NULL when empty) and |*pbad| set to the number of skipped
 * documents; 1 when the file is not valid YAML or nests deeper than
 * max_depth (reported, nothing returned); MCPCFG_ERR_NOMEM.
 */
int mcpcfg_parse(const mcpcfg_options *opts, const char *path,
                 const unsigned char *buf, size_t len, mcpcfg_doc ***pdocs,
                 size_t *pndocs, size_t *pbad);
/* The same; |kept| 0 when nothing of the file is served yet (its first
 * load): a file that fails then does not say "(what it loaded before
 * stays)". mcpcfg_parse() is mcpcfg_parse2() with |kept| 1. */
int mcpcfg_parse2(const mcpcfg_options *opts, const char *path,
                  const unsigned char *buf, size_t len, int kept,
                  mcpcfg_doc ***pdocs, size_t *pndocs, size_t *pbad);

/* What a reading of a file reports and notes, held to be given later (by
 * the thread that asked, in order): |what| 0 a report, else a note. */
typedef struct mcpcfg_said_item {
  int what;
  unsigned long line;
  char *msg;
} mcpcfg_said_item;
typedef struct mcpcfg_said {
  mcpcfg_said_item *v;
  size_t n, cap;
  int nomem; /* an item was lost: the reading failed with NOMEM */
} mcpcfg_said;

/* mcpcfg_parse2() that says nothing: its reports and notes go to |*said|
 * (initialised here; free it with mcpcfg_said_free(), even on failure).
 * Safe on several threads at once (opts and its schema read only). */
int mcpcfg_parse_held(const mcpcfg_options *opts, const char *path,
                      const unsigned char *buf, size_t len, int kept, mcpcfg_doc ***pdocs,
                      size_t *pndocs, size_t *pbad, mcpcfg_said *said);
/* Hands what |said| holds to opts->report and opts->note, in order. */
void mcpcfg_said_deliver(const mcpcfg_options *opts, const char *path,
                         const mcpcfg_said *said);
void mcpcfg_said_free(mcpcfg_said *said);

/* Formats news and hands it to opts->note (when set). */
void mcpcfg_note(const mcpcfg_options *opts, int what, const char *path,
                 unsigned long line, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* Formats a problem and hands it to opts->report (when set). */
void mcpcfg_report(const mcpcfg_options *opts, const char *path,
                   unsigned long line, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* malloc'd copy of |s| (through malloc, so allocation failure tests reach
 * it), or NULL. */
char *mcpcfg_strdup(const char *s);

/* 64-bit FNV-1a, continued from |h| (start with MCPCFG_FNV_BASIS). Used
 * for the resource versions (observable output: do not change it). */
#define MCPCFG_FNV_BASIS UINT64_C(0xcbf29ce484222325)
uint64_t mcpcfg_fnv(uint64_t h, const void *data, size_t len);

/*
 * A fast 64-bit hash of |len| bytes (32 bytes per step in four lanes, a
 * multiply and a rotation per 8-byte word, then an avalanche), for telling
 * whether a file's bytes changed. Not cryptographic, not stable across
 * machines of different byte order: never store it or show it.
 */
uint64_t mcpcfg_hash64(const void *data, size_t len);

/*
 * For the tests. A file whose mtime or ctime is within |racy_ns| of the
 * time it was read (or later) is read again at the next scan (default
 * MCPCFG_RACY_NS); 0 disables the rule (timestamps in the future still
 * count). mcpcfg_loader_reads() is the number of files the loader opened to
 * read since it was created.
 */
#define MCPCFG_RACY_NS (INT64_C(2) * 1000000000)
void mcpcfg_loader_set_racy_ns(mcpcfg_loader *loader, int64_t racy_ns);
unsigned long mcpcfg_loader_reads(const mcpcfg_loader *loader);

/* Collection |i| changed since mcpcfg_loader_apply() last gave it to the
 * store (or never was): 1 or 0. mcpcfg_loader_mark_applied() records it
 * given. */
int mcpcfg_loader_unapplied(const mcpcfg_loader *loader, size_t i);
void mcpcfg_loader_mark_applied(mcpcfg_loader *loader, size_t i);

/* The names of collection |i| changed since it was last applied, when
 * mcpcfg_loader_update() alone changed it (and only a few names): their
 * number, |*names| valid until the next scan, update or apply; (size_t)-1
 * when the whole collection is to be replaced. */
size_t mcpcfg_loader_delta(const mcpcfg_loader *loader, size_t i,
                           const char *const **names);

/* ---- typed bodies (config_body.c) ---- */

/* 0 when every message of opts->kinds is in opts->schema (or bodies are
 * all Structs), else MCPCFG_ERR_INVALID_ARGUMENT. */
int mcpcfg_body_check(const mcpcfg_options *opts);

/* The message the body of a document of |api_version| and |kind| is, or
 * NULL for a Struct body. */
const char *mcpcfg_body_message(const mcpcfg_options *opts,
                                const char *api_version, const char *kind);

/*
 * Encodes |body| (NULL: no body, an empty message) as |message|, the field
 * path of its root being |bodyname| ("spec"). Returns 0 with |*out| (free it
 * with mcp_schema_free_bytes(opts->schema, ..); NULL when empty), |*outlen|
 * and |*nerrs| 0; MCPCFG_ERR_INVALID_ARGUMENT when the body does not match
 * the message, with every mismatch counted in |*nerrs| and the first
 * |max_errs| (in line order) in |errs| (mcp_schema_encode_all());
 * MCPCFG_ERR_NOMEM. On failure |*out| and |*outlen| are untouched.
 */
int mcpcfg_body_encode(const mcpcfg_options *opts, const char *message,
                       const mcp_schema_value *body, const char *bodyname,
                       uint8_t **out, size_t *outlen, mcp_schema_error *errs,
                       size_t max_errs, size_t *nerrs);

#endif /* MCPCFG_CONFIG_INTERNAL_H */
