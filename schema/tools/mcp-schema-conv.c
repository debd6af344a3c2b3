/*
 * mcp-schema-conv: converts documents to protobuf wire bytes and back with
 * libmcp-schema (the oracle and round-trip tests drive it).
 *
 *   mcp-schema-conv encode [--json] [--ignore-unknown] [--path P]
 *                   [--doc N] [--select KEY] -d SET.pb [-d SET.pb...] TYPE
 *                   [IN [OUT]]
 *       IN (default stdin) is YAML (every document is encoded, each output
 *       written as a 4-byte big-endian length and the bytes when there are
 *       several; one document: the bytes alone), or JSON with --json.
 *       --doc N: only the N-th document (from 0); --select KEY: the value
 *       under KEY of each document (e.g. spec), which is also the path
 *       prefix of error messages unless --path is given.
 *   mcp-schema-conv decode [--pretty] [--proto-names] [--unknown-error]
 *                   -d SET.pb... TYPE [IN [OUT]]
 *       IN holds wire bytes; OUT gets the proto3 JSON and a newline.
 *
 * Exit status: 0 done, 1 conversion error (message on stderr as
 * FILE:LINE: message), 2 usage or I/O error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/schema.h"

static int read_all(const char *path, char **out, size_t *len) {
  FILE *f = path && strcmp(path, "-") ? fopen(path, "rb") : stdin;
  if (!f) {
    fprintf(stderr, "mcp-schema-conv: %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 65536, n = 0;
  char *b = malloc(cap);
  for (;;) {
    if (!b) {
      fprintf(stderr, "mcp-schema-conv: out of memory\n");
      return -1;
    }
    n += fread(b + n, 1, cap - n, f);
    if (n < cap)
      break;
    cap *= 2;
    char *nb = realloc(b, cap);
    if (!nb)
      free(b);
    b = nb;
  }
  int bad = ferror(f);
  if (f != stdin)
    fclose(f);
  if (bad) {
    fprintf(stderr, "mcp-schema-conv: %s: read error\n", path ? path : "stdin");
    free(b);
    return -1;
  }
  *out = b;
  *len = n;
  return 0;
}

static int usage(void) {
  fprintf(stderr,
          "usage: mcp-schema-conv encode [--json] [--ignore-unknown] [--path P] [--doc N] [--select KEY]\n"
          "                       -d SET.pb... TYPE [IN [OUT]]\n"
          "       mcp-schema-conv decode [--pretty] [--proto-names] [--unknown-error] -d SET.pb... TYPE [IN [OUT]]\n");
  return 2;
}

static void report(const char *file, const mcp_schema_error *e) {
  if (e->line)
    fprintf(stderr, "%s:%lu: %s\n", file, e->line, e->message);
  else
    fprintf(stderr, "%s: %s\n", file, e->message);
}

int main(int argc, char **argv) {
  if (argc < 2)
    return usage();
  int encode = !strcmp(argv[1], "encode");
  if (!encode && strcmp(argv[1], "decode"))
    return usage();
  int json = 0;
  long only_doc = -1;
  unsigned flags = 0;
  const char *select = NULL;
  const char *path = NULL, *type = NULL, *in = NULL, *outp = NULL;
  mcp_schema *s;
  if (mcp_schema_new(&s, NULL)) {
    fprintf(stderr, "mcp-schema-conv: out of memory\n");
    return 2;
  }
  int rc = 2;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json"))
      json = 1;
    else if (!strcmp(a, "--ignore-unknown"))
      flags |= MCP_SCHEMA_IGNORE_UNKNOWN_FIELDS;
    else if (!strcmp(a, "--pretty"))
      flags |= MCP_SCHEMA_JSON_PRETTY;
    else if (!strcmp(a, "--proto-names"))
      flags |= MCP_SCHEMA_JSON_PROTO_NAMES;
    else if (!strcmp(a, "--unknown-error"))
      flags |= MCP_SCHEMA_JSON_UNKNOWN_ERROR;
    else if (!strcmp(a, "--path") && i + 1 < argc)
      path = argv[++i];
    else if (!strcmp(a, "--select") && i + 1 < argc)
      select = argv[++i];
    else if (!strcmp(a, "--doc") && i + 1 < argc)
      only_doc = atol(argv[++i]);
    else if (!strcmp(a, "-d") && i + 1 < argc) {
      char *d;
      size_t n;
      mcp_schema_error e;
      if (read_all(argv[++i], &d, &n))
        goto out;
      int r = mcp_schema_add_descriptor_set(s, (const uint8_t *)d, n, &e);
      free(d);
      if (r) {
        report(argv[i], &e);
        goto out;
      }
    } else if (a[0] == '-' && a[1]) {
      usage();
      goto out;
    } else if (!type)
      type = a;
    else if (!in)
      in = a;
    else if (!outp)
      outp = a;
    else {
      usage();
      goto out;
    }
  }
  if (!type) {
    usage();
    goto out;
  }
  char *data;
  size_t len;
  if (read_all(in, &data, &len))
    goto out;
  FILE *out = outp ? fopen(outp, "wb") : stdout;
  if (!out) {
    fprintf(stderr, "mcp-schema-conv: %s: %s\n", outp, strerror(errno));
    free(data);
    goto out;
  }
  const char *name = in ? in : "<stdin>";
  mcp_schema_error e;
  if (encode) {
    mcp_schema_docs *docs;
    int r = json ? mcp_schema_parse_json(NULL, data, len, &docs, &e)
                 : mcp_schema_parse_yaml(NULL, data, len, &docs, &e);
    if (r) {
      report(name, &e);
      rc = 1;
    } else {
      size_t n = mcp_schema_docs_count(docs), from = 0;
      if (only_doc >= 0) {
        from = (size_t)only_doc;
        n = from < n ? from + 1 : 0;
        if (!n)
          fprintf(stderr, "mcp-schema-conv: %s: no document %ld\n", name, only_doc);
      }
      rc = n ? 0 : 1;
      for (size_t i = from; i < n && !rc; i++) {
        uint8_t *bytes;
        size_t blen;
        const mcp_schema_value *v = mcp_schema_docs_root(docs, i);
        if (select && !(v = mcp_schema_value_get(v, select))) {
          fprintf(stderr, "mcp-schema-conv: %s: document %zu has no \"%s\"\n", name, i,
                  select);
          rc = 1;
          break;
        }
        /* Every mismatch of the document at once, up to a cap. */
        mcp_schema_error errs[MCP_SCHEMA_ERRORS_SHOWN];
        size_t nerr = 0;
        r = mcp_schema_encode_all(s, type, v, path ? path : select, flags, &bytes, &blen,
                                  errs, MCP_SCHEMA_ERRORS_SHOWN, &nerr);
        if (r) {
          for (size_t k = 0; k < nerr && k < MCP_SCHEMA_ERRORS_SHOWN; k++)
            report(name, &errs[k]);
          if (nerr > MCP_SCHEMA_ERRORS_SHOWN)
            fprintf(stderr, "%s: ... and %zu more\n", name, nerr - MCP_SCHEMA_ERRORS_SHOWN);
          rc = 1;
          break;
        }
        if (n - from > 1) {
          uint8_t h[4] = {(uint8_t)(blen >> 24), (uint8_t)(blen >> 16), (uint8_t)(blen >> 8),
                          (uint8_t)blen};
          fwrite(h, 1, 4, out);
        }
        if (blen)
          fwrite(bytes, 1, blen, out);
        mcp_schema_free_bytes(s, bytes);
      }
      mcp_schema_docs_free(docs);
    }
  } else {
    char *text;
    size_t tlen;
    int r = mcp_schema_to_json(s, type, (const uint8_t *)data, len, flags, &text, &tlen, &e);
    if (r) {
      report(name, &e);
      rc = 1;
    } else {
      fwrite(text, 1, tlen, out);
      fputc('\n', out);
      mcp_schema_free_bytes(s, text);
      rc = 0;
    }
  }
  free(data);
  if ((out != stdout && fclose(out)) || (out == stdout && fflush(out))) {
    fprintf(stderr, "mcp-schema-conv: write error\n");
    rc = 2;
  }
out:
  mcp_schema_free(s);
  return rc;
}
