/* The --out mirror of mcp-sink. */
#include "mcp-sink/mirror.h"

#include <dirent.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/args.h"
#include "util/log.h"
#include "mcp-sink/resource_json.h"

#define TMP_PREFIX ".mcp-sink-tmp-"
/* Segments longer than this are mapped (mirror.h); the mapped form is
 * longer, so the two sets of file names never meet. */
#define MAX_SEGMENT 200
#define MAPPED_PREFIX 150

/* ---- SHA-256 (FIPS 180-4), for the names of long segments ---- */

typedef struct sha256 {
  uint32_t h[8];
  uint8_t block[64];
  uint64_t len;
  size_t n;
} sha256;

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR32(x, r) (((x) >> (r)) | ((x) << (32 - (r))))

static void sha256_block(sha256 *c, const uint8_t *p) {
  uint32_t w[64], v[8];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
           (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ROR32(w[i - 15], 7) ^ ROR32(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ROR32(w[i - 2], 17) ^ ROR32(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  memcpy(v, c->h, sizeof v);
  for (int i = 0; i < 64; i++) {
    uint32_t s1 = ROR32(v[4], 6) ^ ROR32(v[4], 11) ^ ROR32(v[4], 25);
    uint32_t ch = (v[4] & v[5]) ^ (~v[4] & v[6]);
    uint32_t t1 = v[7] + s1 + ch + K256[i] + w[i];
    uint32_t s0 = ROR32(v[0], 2) ^ ROR32(v[0], 13) ^ ROR32(v[0], 22);
    uint32_t maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
    uint32_t t2 = s0 + maj;
    memmove(v + 1, v, 7 * sizeof v[0]);
    v[4] += t1;
    v[0] = t1 + t2;
  }
  for (int i = 0; i < 8; i++)
    c->h[i] += v[i];
}

static void sha256_hex(const void *data, size_t len, char out[65]) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                 0xa54ff53a, 0x510e527f, 0x9b05688c,
                                 0x1f83d9ab, 0x5be0cd19};
  sha256 c;
  const uint8_t *p = data;
  memcpy(c.h, iv, sizeof iv);
  c.len = (uint64_t)len * 8;
  for (; len >= 64; p += 64, len -= 64)
    sha256_block(&c, p);
  memset(c.block, 0, sizeof c.block);
  memcpy(c.block, p, len);
  c.block[len] = 0x80;
  if (len >= 56) {
    sha256_block(&c, c.block);
    memset(c.block, 0, sizeof c.block);
  }
  for (int i = 0; i < 8; i++)
    c.block[56 + i] = (uint8_t)(c.len >> (56 - 8 * i));
  sha256_block(&c, c.block);
  for (int i = 0; i < 32; i++)
    snprintf(out + 2 * i, 3, "%02x", (unsigned)(c.h[i / 4] >> (24 - 8 * (i % 4))) & 0xff);
}

char *tool_mirror_file_of(const char *name) {
  size_t n = strlen(name), cap = n + 1;
  for (const char *seg = name;;) { /* room for the mapped segments */
    const char *e = strchr(seg, '/');
    size_t l = e ? (size_t)(e - seg) : strlen(seg);
    if (l > MAX_SEGMENT)
      cap += MAPPED_PREFIX + 65;
    if (!e)
      break;
    seg = e + 1;
  }
  char *out = malloc(cap), *o = out;
  if (!out)
    return NULL;
  for (const char *seg = name;;) {
    const char *e = strchr(seg, '/');
    size_t l = e ? (size_t)(e - seg) : strlen(seg);
    if (l <= MAX_SEGMENT) {
      memcpy(o, seg, l);
      o += l;
    } else {
      /* A prefix that ends on a UTF-8 character boundary, "~", and the
       * SHA-256 of the whole segment: 212 to 215 bytes. */
      size_t k = MAPPED_PREFIX;
      while (k > 0 && ((unsigned char)seg[k] & 0xc0) == 0x80)
        k--;
      char hex[65];
      sha256_hex(seg, l, hex);
      memcpy(o, seg, k);
      o += k;
      *o++ = '~';
      memcpy(o, hex, 64);
      o += 64;
    }
    if (!e)
      break;
    *o++ = '/';
    seg = e + 1;
  }
  *o = '\0';
  return out;
}

typedef struct mcoll {
  char *name;
  char *dir;       /* DIR/<name> */
  json_t *written; /* tool_mirror_file_of(name) -> version on disk */
  int reconciled;  /* the first full state was applied */
} mcoll;

struct tool_mirror {
  char *root;
  mcoll *colls;
  size_t ncolls;
  const mcp_schema *schema; /* tool_mirror_set_schema(); NULL: none */
  mcp_schema *structs;      /* Struct bodies and base64 (owned) */
};


void tool_mirror_set_schema(tool_mirror *m, const mcp_schema *schema) {
  m->schema = schema;
}

static char *join(const char *a, const char *b, const char *suffix) {
  size_t la = strlen(a), lb = strlen(b), ls = strlen(suffix);
  char *p = malloc(la + lb + ls + 2);
  if (p) {
    memcpy(p, a, la);
    p[la] = '/';
    memcpy(p + la + 1, b, lb);
    memcpy(p + la + 1 + lb, suffix, ls + 1);
  }
  return p;
}

/* mkdir -p of |path| (modified in place and restored). */
static int mkdirs(char *path) {
  for (char *p = path + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char c = *p;
      *p = '\0';
      int rv = mkdir(path, 0755);
      int e = errno;
      *p = c;
      if (rv != 0 && e != EEXIST) {
        errno = e;
        return -1;
      }
      if (c == '\0')
        break;
    }
  }
  struct stat st;
  if (stat(path, &st) != 0)
    return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

/* mkdir -p of the directory part of |path|. */
static int mkparents(char *path) {
  char *slash = strrchr(path, '/');
  if (!slash || slash == path)
    return 0;
  *slash = '\0';
  int rv = mkdirs(path);
  int e = errno;
  *slash = '/';
  errno = e;
  return rv;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Writes |data| to |path| through a temporary file and rename(2). */
static int write_atomic(const char *path, const char *data, size_t len) {
  const char *slash = strrchr(path, '/');
  size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
  char *tmp = malloc(dl + sizeof(TMP_PREFIX "XXXXXX"));
  if (!tmp) {
    errno = ENOMEM;
    return -1;
  }
  memcpy(tmp, path, dl);
  memcpy(tmp + dl, TMP_PREFIX "XXXXXX", sizeof(TMP_PREFIX "XXXXXX"));
  int fd = mkstemp(tmp);
  if (fd < 0) {
    free(tmp);
    return -1;
  }
  int rv = write_all(fd, data, len);
  if (rv == 0)
    rv = fchmod(fd, 0644);
  if (close(fd) != 0)
    rv = -1;
  if (rv == 0)
    rv = rename(tmp, path);
  if (rv != 0) {
    int e = errno;
    unlink(tmp);
    errno = e;
  }
  free(tmp);
  return rv;
}

/* Removes the empty directories from |path|'s parent up to |stop|
 * (exclusive). */
static void prune(const char *path, const char *stop) {
  char *p = strdup(path);
  size_t sl = strlen(stop);
  for (char *slash; p && (slash = strrchr(p, '/')) != NULL;) {
    *slash = '\0';
    if (strlen(p) <= sl || rmdir(p) != 0)
      break;
  }
  free(p);
}

static void free_colls(tool_mirror *m) {
  for (size_t i = 0; i < m->ncolls; i++) {
    free(m->colls[i].name);
    free(m->colls[i].dir);
    json_decref(m->colls[i].written);
  }
  free(m->colls);
}

int tool_mirror_new(tool_mirror **pm, const char *dir,
                    const char *const *colls, size_t ncolls, char *err,
                    size_t errlen) {
  tool_mirror *m = calloc(1, sizeof(*m));
  if (!m || tool_struct_schema_new(&m->structs) != 0 ||
      !(m->root = strdup(dir)) ||
      !(m->colls = calloc(ncolls ? ncolls : 1, sizeof(mcoll)))) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  /* No trailing slashes: paths are compared as strings. */
  for (size_t l = strlen(m->root); l > 1 && m->root[l - 1] == '/';)
    m->root[--l] = '\0';
  for (size_t i = 0; i < ncolls; i++) {
    mcoll *c = &m->colls[i];
    m->ncolls++;
    if (!(c->name = strdup(colls[i])) || !(c->dir = join(m->root, colls[i], "")) ||
        !(c->written = json_object())) {
      snprintf(err, errlen, "out of memory");
      goto fail;
    }
  }
  if (mkdirs(m->root) != 0) {
    snprintf(err, errlen, "cannot create %s: %s", m->root, strerror(errno));
    goto fail;
  }
  *pm = m;
  return 0;
fail:
  tool_mirror_del(m);
  return -1;
}

void tool_mirror_del(tool_mirror *m) {
  if (m) {
    free_colls(m);
    free(m->root);
    mcp_schema_free(m->structs);
    free(m);
  }
}

/* 1 when |path| is the directory of a requested collection. */
static int is_coll_dir(const tool_mirror *m, const char *path) {
  for (size_t i = 0; i < m->ncolls; i++) {
    if (strcmp(m->colls[i].dir, path) == 0)
      return 1;
  }
  return 0;
}

/*
 * Deletes the files below |path| (a directory of collection |c|, |rel| the
 * resource-name prefix it stands for, "" at the top) that hold no resource
 * of |c|, and the directories left empty.
 */
static void sweep(tool_mirror *m, mcoll *c, const char *path,
                  const char *rel) {
  DIR *d = opendir(path);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    const char *n = de->d_name;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
      continue;
    char *child = join(path, n, "");
    if (!child)
      break;
    struct stat st;
    if (lstat(child, &st) != 0) {
      free(child);
      continue;
    }
    size_t nl = strlen(n);
    if (S_ISDIR(st.st_mode)) {
      if (!is_coll_dir(m, child)) {
        char *sub = rel[0] ? join(rel, n, "") : strdup(n);
        if (sub) {
          sweep(m, c, child, sub);
          free(sub);
          rmdir(child); /* only when empty */
        }
      }
    } else if (S_ISREG(st.st_mode)) {
      int stale = 0;
      if (strncmp(n, TMP_PREFIX, sizeof(TMP_PREFIX) - 1) == 0) {
        stale = 1;
      } else if (nl > 5 && strcmp(n + nl - 5, ".json") == 0) {
        char *name = rel[0] ? join(rel, n, "") : strdup(n);
        if (name) {
          name[strlen(name) - 5] = '\0';
          stale = json_object_get(c->written, name) == NULL;
          free(name);
        }
      }
      if (stale) {
        if (unlink(child) == 0)
          log_debug("mirror: removed stale %s", child);
        else
          log_warn("mirror: cannot remove %s: %s", child, strerror(errno));
      }
    }
    free(child);
  }
  closedir(d);
}

/* |key|: tool_mirror_file_of() of the resource name. */
static int remove_file(mcoll *c, const char *key, char *msg, size_t msglen) {
  char *path = join(c->dir, key, ".json");
  if (!path) {
    snprintf(msg, msglen, "out of memory");
    return MCP_CODE_INTERNAL;
  }
  int code = 0;
  if (unlink(path) != 0 && errno != ENOENT) {
    snprintf(msg, msglen, "cannot remove %s: %s", path, strerror(errno));
    code = MCP_CODE_INTERNAL;
  } else {
    prune(path, c->dir);
    json_object_del(c->written, key);
  }
  free(path);
  return code;
}

/* Full state: removes the files written for names the new state lacks
 * (beyond |removed|: a change that failed half way may have left some).
 * |keys| are the file keys of ch->resources. */
static int remove_others(mcoll *c, const mcp_change *ch, char **keys,
                         char *msg, size_t msglen) {
  if (json_object_size(c->written) <= ch->nresources)
    return 0; /* every name written is in the new state */
  json_t *keep = json_object();
  for (size_t i = 0; keep && i < ch->nresources; i++) {
    if (json_object_set_new(keep, keys[i], json_true()) != 0) {
      json_decref(keep);
      keep = NULL;
    }
  }
  if (!keep) {
    snprintf(msg, msglen, "out of memory");
    return MCP_CODE_RESOURCE_EXHAUSTED;
  }
  int code = 0;
  const char *name;
  json_t *v;
  void *tmp;
  json_object_foreach_safe(c->written, tmp, name, v) {
    if (!code && !json_object_get(keep, name))
      code = remove_file(c, name, msg, msglen);
  }
  json_decref(keep);
  return code;
}

int tool_mirror_apply(tool_mirror *m, const mcp_change *ch, char *msg,
                      size_t msglen) {
  mcoll *c = NULL;
  for (size_t i = 0; i < m->ncolls && !c; i++) {
    if (strcmp(m->colls[i].name, ch->collection) == 0)
      c = &m->colls[i];
  }
  if (!c)
    return 0;
  /* Check everything before writing anything. */
  for (size_t i = 0; i < ch->nresources; i++) {
    if (!tool_path_safe(ch->resources[i].name)) {
      snprintf(msg, msglen, "resource name \"%s\" is not a safe path",
               ch->resources[i].name);
      return MCP_CODE_INVALID_ARGUMENT;
    }
  }
  json_t **docs = calloc(ch->nresources ? ch->nresources : 1, sizeof(*docs));
  char **keys = calloc(ch->nresources ? ch->nresources : 1, sizeof(*keys));
  int code = 0;
  for (size_t i = 0; docs && keys && i < ch->nresources && !code; i++) {
    if (!(keys[i] = tool_mirror_file_of(ch->resources[i].name)))
      code = MCP_CODE_RESOURCE_EXHAUSTED;
  }
  if (!docs || !keys || code) {
    snprintf(msg, msglen, "out of memory");
    code = MCP_CODE_RESOURCE_EXHAUSTED;
    goto out;
  }
  for (size_t i = 0; i < ch->nresources && !code; i++) {
    const mcp_resource *r = &ch->resources[i];
    const char *have = json_string_value(json_object_get(c->written, keys[i]));
    if (have && strcmp(have, r->version) == 0)
      continue; /* this version is on disk */
    char why[200];
    if (!(docs[i] = tool_resource_json(r, m->structs, m->schema, why, sizeof(why)))) {
      snprintf(msg, msglen, "resource %s: %s", r->name, why);
      code = MCP_CODE_INVALID_ARGUMENT;
    }
  }
  if (!code && (ch->nresources || !c->reconciled) && mkdirs(c->dir) != 0) {
    snprintf(msg, msglen, "cannot create %s: %s", c->dir, strerror(errno));
    code = MCP_CODE_INTERNAL;
  }
  for (size_t i = 0; i < ch->nresources && !code; i++) {
    if (!docs[i])
      continue;
    const mcp_resource *r = &ch->resources[i];
    char *text = json_dumps(docs[i], JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    char *path = join(c->dir, keys[i], ".json");
    size_t tl = text ? strlen(text) : 0;
    if (text)
      text[tl] = '\n'; /* json_dumps' NUL becomes the final newline */
    if (!text || !path) {
      snprintf(msg, msglen, "out of memory");
      code = MCP_CODE_RESOURCE_EXHAUSTED;
    } else if (mkparents(path) != 0 || write_atomic(path, text, tl + 1) != 0) {
      snprintf(msg, msglen, "cannot write %s: %s", path, strerror(errno));
      code = MCP_CODE_INTERNAL;
    } else if (json_object_set_new(c->written, keys[i],
                                   json_string(r->version)) != 0) {
      json_object_del(c->written, keys[i]); /* rewritten next time */
    }
    free(text);
    free(path);
  }
  /* A removed name that is not a safe path was never written (its change
   * was rejected): nothing to remove. Incremental pushes name such
   * resources when they came and went after what the sink ACKed last. */
  for (size_t i = 0; i < ch->nremoved && !code; i++) {
    if (!tool_path_safe(ch->removed[i]))
      continue;
    char *key = tool_mirror_file_of(ch->removed[i]);
    if (!key) {
      snprintf(msg, msglen, "out of memory");
      code = MCP_CODE_RESOURCE_EXHAUSTED;
    } else {
      code = remove_file(c, key, msg, msglen);
      free(key);
    }
  }
  /* The whole content (the core says when: mcp_change.complete). */
  int whole = ch->complete;
  if (!code && whole)
    code = remove_others(c, ch, keys, msg, msglen);
  if (!code && whole && !c->reconciled) {
    sweep(m, c, c->dir, "");
    c->reconciled = 1;
  }
out:
  for (size_t i = 0; docs && i < ch->nresources; i++)
    json_decref(docs[i]);
  for (size_t i = 0; keys && i < ch->nresources; i++)
    free(keys[i]);
  free(docs);
  free(keys);
  return code;
}
