/* --descriptor-set, --kind, --body: typed bodies on the command line. */
#include "cli/schema_args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mcp/schema_istio.h>

#include "util/log.h"
#include "views/schema_swarmkit.h"

/* Descriptor sets are small (Istio's is 40 KiB); this bounds a mistake
 * such as a multi-gigabyte file given by error. */
#define MAX_SET_BYTES ((size_t)64 << 20)

static int usage_err(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "%s: ", tool_log_prog());
  fprintf(stderr, fmt, a, b);
  fputc('\n', stderr);
  return -1;
}

/* "G/V/K=msg" or "V/K=msg" (core group). 0, -1 (reported), -2 (memory). */
static int parse_kind(const char *s, tool_schema_args *a) {
  const char *eq = strchr(s, '=');
  const char *fmt = "--kind: expected GROUP/VERSION/KIND=full.message.Name, "
                    "not %s%s";
  if (!eq || !eq[1] || eq == s)
    return usage_err(fmt, s, "");
  const char *av = *s == '/' ? s + 1 : s; /* "/v1/ConfigMap": core */
  const char *slash = NULL;
  size_t nslash = 0;
  for (const char *p = av; p < eq; p++) {
    if (*p != '/')
      continue;
    if (p == av || p[-1] == '/' || p + 1 == eq) /* an empty part */
      return usage_err(fmt, s, "");
    slash = p;
    nslash++;
  }
  if (nslash < 1 || nslash > 2 || (av != s && nslash != 1))
    return usage_err(fmt, s, "");
  const char *m = eq[1] == '.' ? eq + 2 : eq + 1; /* ".pkg.Msg" too */
  if (!*m || strchr(m, '/'))
    return usage_err(fmt, s, "");
  tool_kind *k = realloc(a->kinds, (a->nkinds + 1) * sizeof(*k));
  if (!k)
    return -2;
  a->kinds = k;
  k = &a->kinds[a->nkinds];
  k->api_version = strndup(av, (size_t)(slash - av));
  k->kind = strndup(slash + 1, (size_t)(eq - slash - 1));
  k->message = strdup(m);
  if (!k->api_version || !k->kind || !k->message) {
    free(k->api_version);
    free(k->kind);
    free(k->message);
    return -2;
  }
  a->nkinds++;
  return 0;
}

int tool_schema_parse_arg(int argc, char **argv, int *i, tool_schema_args *a,
                          int source) {
  const char *v;
  int rv;
  if ((rv = tool_arg_value(argc, argv, i, "--descriptor-set", &v)) != 0) {
    if (rv < 0)
      return -1;
    if (!v[0])
      return usage_err("--descriptor-set needs a file%s%s", "", "");
    return tool_strv_add(&a->sets, v, 1) != 0 ? -2 : 1;
  }
  if (!source)
    return 0;
  if ((rv = tool_arg_value(argc, argv, i, "--kind", &v)) != 0) {
    if (rv < 0)
      return -1;
    rv = parse_kind(v, a);
    return rv < 0 ? rv : 1;
  }
  if ((rv = tool_arg_value(argc, argv, i, "--body", &v)) != 0) {
    if (rv < 0)
      return -1;
    if (strcmp(v, "struct") == 0)
      a->body_struct = 1;
    else if (strcmp(v, "typed") == 0)
      a->body_struct = 0;
    else
      return usage_err("--body: expected typed or struct, not %s%s", v, "");
    return 1;
  }
  return 0;
}

void tool_schema_args_free(tool_schema_args *a) {
  tool_strv_free(&a->sets);
  for (size_t i = 0; i < a->nkinds; i++) {
    free(a->kinds[i].api_version);
    free(a->kinds[i].kind);
    free(a->kinds[i].message);
  }
  free(a->kinds);
  a->kinds = NULL;
  a->nkinds = 0;
}

/* The whole file, malloc'd. 0, or -1 with errno set (EFBIG: too large). */
static int read_file(const char *path, unsigned char **pbuf, size_t *plen) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return -1;
  unsigned char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      if (cap >= MAX_SET_BYTES) {
        free(buf);
        fclose(f);
        errno = EFBIG;
        return -1;
      }
      cap = cap ? 2 * cap : 65536;
      unsigned char *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        errno = ENOMEM;
        return -1;
      }
      buf = nb;
    }
    size_t n = fread(buf + len, 1, cap - len, f);
    len += n;
    if (n == 0)
      break;
  }
  int err = ferror(f) ? EIO : 0;
  fclose(f);
  if (err) {
    free(buf);
    errno = err;
    return -1;
  }
  *pbuf = buf;
  *plen = len;
  return 0;
}

int tool_schema_load(const tool_schema_args *a, mcp_schema **ps, char *why,
                     size_t whylen) {
  mcp_schema *s = NULL;
  mcp_schema_error err;
  int rv = mcp_schema_new(&s, NULL);
  if (rv < 0) {
    snprintf(why, whylen, "cannot create the schema: %s", mcp_strerror(rv));
    return -1;
  }
  if ((rv = mcp_schema_add_istio(s, &err)) < 0) {
    snprintf(why, whylen, "Istio's built-in types: %s", err.message);
    goto fail;
  }
  /* swarmkit's, for the Dispatcher's objects (issue 16). */
  if ((rv = tool_schema_add_swarmkit(s, &err)) < 0) {
    snprintf(why, whylen, "swarmkit's built-in types: %s", err.message);
    goto fail;
  }
  for (size_t i = 0; i < a->sets.n; i++) {
    const char *path = a->sets.v[i];
    unsigned char *buf;
    size_t len;
    if (read_file(path, &buf, &len) != 0) {
      snprintf(why, whylen, "--descriptor-set %s: %s", path,
               errno == EFBIG ? "larger than 64 MiB" : strerror(errno));
      goto fail;
    }
    rv = mcp_schema_add_descriptor_set(s, buf, len, &err);
    free(buf);
    if (rv < 0) {
      snprintf(why, whylen, "--descriptor-set %s: %s%s", path,
               rv == MCP_ERR_MALFORMED
                   ? "not a FileDescriptorSet (protoc --include_imports "
                     "--descriptor_set_out=FILE): "
                   : "",
               err.message);
      goto fail;
    }
  }
  for (size_t i = 0; i < a->nkinds; i++) {
    const tool_kind *k = &a->kinds[i];
    if (!mcp_schema_has_message(s, k->message)) {
      snprintf(why, whylen,
               "--kind %s/%s=%s: no message %s in the schema (Istio's "
               "built-in types and the --descriptor-set files)",
               k->api_version, k->kind, k->message, k->message);
      goto fail;
    }
  }
  *ps = s;
  return 0;
fail:
  mcp_schema_free(s);
  return -1;
}
