/*
 * The loader (mcpcfg; tools/loader/): loads a directory of Kubernetes-style
 * YAML files as MCP resources, for the mcp-source program (and, through
 * config_internal.h, the document format of tools/etcd/). Internal to
 * tools/ (not installed).
 *
 * Directory: every regular file named *.yaml or *.yml below the root,
 * recursively (symbolic links followed, loops skipped); names starting with
 * '.' are ignored (so Kubernetes ConfigMap mounts, whose real files live in
 * "..data", load through their top-level links). Multi-document files are
 * allowed; empty documents are skipped silently.
 *
 * Document -> resource:
 *   collection  annotation mcp.istio.io/collection, else from apiVersion
 *               and kind: GROUP.istio.io/V Kind -> istio/GROUP/V/plural,
 *               other groups -> k8s/GROUP/V/plural, no group -> k8s/core/V/..
 *   name        "<metadata.namespace>/<metadata.name>" or "<metadata.name>"
 *   version     metadata.resourceVersion, else 16 hex digits of a 64-bit
 *               FNV-1a hash over everything the resource carries
 *               (collection, name, labels, annotations, create time, body);
 *               mappings are encoded with sorted keys, so reordering keys or
 *               editing comments does not change it.
 *   labels, annotations  copied; non-string scalars as their text, null as "".
 *   create time metadata.creationTimestamp (RFC 3339); null means none.
 *   body        google.protobuf.Any of type_url MCPCFG_STRUCT_TYPE_URL whose
 *               value is `spec` encoded as google.protobuf.Struct; without
 *               `spec`, `data` is used (ConfigMaps, Secrets); without either,
 *               the document's top-level fields other than apiVersion, kind
 *               and metadata, as one mapping (Kubernetes kinds without a
 *               spec: Endpoints' `subsets`); with none of them, an empty
 *               Struct. Typed bodies (options.schema): a document
 *               whose apiVersion and kind are in options.kinds has its body
 *               encoded as that message by the proto3 JSON mapping
 *               (libmcp-schema), type_url "type.googleapis.com/<message>";
 *               a body that does not match the message (unknown field, wrong
 *               type, number out of range, unknown enum name...) is reported
 *               with its line and field path ("spec.http[0].route[0].weight:
 *               expected an integer, got \"x\"") and skips the document.
 * Scalars follow the YAML 1.2 core schema: plain true/false (any of the
 * three casings) are bools, plain null/~/empty are null, plain ints (also
 * 0x.., 0o..) and floats (also .inf, .nan) are numbers, everything else
 * (yes/no/on/off included) and every quoted or block scalar is a string.
 * Tags !!str, !!int, !!float, !!bool, !!null, !!map, !!seq and "!" are
 * honoured; other tags are reported. Anchors and aliases are supported; an
 * alias to a node that is not finished yet (recursion) is reported, and the
 * expansion of a document is bounded (max_nodes nodes, max_file_size bytes
 * of scalars), so "billion laughs" is reported, not expanded. Merge keys
 * ("<<") are ordinary keys. Duplicate keys in a mapping are reported.
 *
 * Limits: each document is checked with the core's mcp_resource_check(),
 * with mcp_resource_limits_default() (what mcp_sink_options_default(), and
 * so mcp-sink, applies: name at most 512 bytes, version 256, at most 256
 * labels plus annotations) and the name rules of the options
 * (MCP_NAMES_KUBERNETES by default: each '/' segment a lowercase DNS-1123
 * subdomain; MCP_NAMES_LENIENT is the permissive option). A document that
 * fails is a bad document (below): the loader never serves what the
 * project's own sink would NACK.
 *
 * Reading: a file is used only when read whole and consistently: its stat
 * (size, mtime, ctime, inode, device) is the same at the walk, before the
 * read and after it, and exactly st_size bytes were read. Otherwise (a
 * writer at work) nothing of that read is used: the file keeps what it had
 * (a new file has nothing yet), is read again at the next scan, and is not
 * reported; mcpcfg_loader_unstable_reads() counts such reads.
 *
 * Problems are reported through a callback and never stop the other files:
 *   - a file that cannot be read, is larger than max_file_size, is not
 *     valid YAML or nests mappings and sequences deeper than max_depth
 *     (libyaml's time grows with the square of the nesting, so reading stops
 *     there) keeps all the documents it had before, those of its last whole
 *     and consistent read (none if new); the size and read reports say how
 *     many ("the N documents of its last complete read stay", or "nothing
 *     from it is served");
 *   - a document that is not a mapping, lacks apiVersion, kind or
 *     metadata.name, breaks a limit above, or has a bad value (timestamp,
 *     label, spec, tag, NUL character, alias too deep or too large,
 *     duplicate key) is skipped, every problem of its metadata and body
 *     reported (line order, at most MCP_SCHEMA_ERRORS_SHOWN, then
 *     "... and N more"; the last one ends "; document skipped"); its
 *     file's other documents load, and a resource the file had before that
 *     no valid document provides any more is kept (a broken edit never
 *     deletes anything); once the file is fully valid it provides exactly
 *     its documents;
 *   - two documents with the same collection and name: a resource that
 *     is served keeps its file (its owner) as long as that file defines
 *     it, whatever the paths of newer files that define it too; a name no
 *     file serves yet (first load, or the owner stopped defining it) goes
 *     to the lexically first path (byte order of the full path). In one
 *     file the first document wins. Every other document is reported, once,
 *     at its own PATH:LINE, naming the PATH:LINE that serves the resource.
 * A file that is deleted drops its resources.
 *
 * Change detection: every scan walks the tree and stat()s every file, but
 * reads a file only when its stat differs from that of its last read (size,
 * mtime and ctime with their nanoseconds, inode, device) or when that read
 * was "racy". ctime changes on every write, rename over, chmod and utime and
 * cannot be set back (touch -d sets mtime only), so a same-size rewrite
 * with its mtime restored is still seen, and an atomic replace (rename of a
 * new file, ConfigMap "..data" swap) is seen by its inode. What stat cannot
 * show is a change made within the same timestamp tick as the previous one
 * (coarse clocks, file systems with 1 s or 2 s timestamps). Hence the racy
 * rule (git's "racy git"): a read is racy when the file's mtime or ctime
 * was within 2 s of the time of the read, or later; such a file is read
 * again at the next scan, whatever its stat, until a read is made more than
 * 2 s after its last change. A change after a non-racy read has a later
 * timestamp (as long as the file system's timestamps have 2 s granularity
 * or finer and its clock agrees with this host's within that). A file that
 * could not be read is tried again at every scan. A file read is re-parsed
 * only when its bytes changed (size and a fast 64-bit hash, not stored
 * anywhere); a file whose bytes did not change is not reported again.
 *
 * Conventions: functions returning int return >= 0 on success and a negative
 * error on failure: MCPCFG_ERR_NOMEM, MCPCFG_ERR_INVALID_ARGUMENT,
 * MCPCFG_ERR_IO, or (mcpcfg_loader_apply) any error of the core. Memory
 * comes from malloc; every allocation is checked. Strings are NUL-terminated
 * UTF-8. Not thread-safe. Numbers are parsed with strtod: keep LC_NUMERIC
 * "C".
 */
#ifndef MCPCFG_CONFIG_LOAD_H
#define MCPCFG_CONFIG_LOAD_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <mcp/mcp.h>
#include <mcp/schema.h>

#define MCPCFG_ERR_NOMEM MCP_ERR_NOMEM
#define MCPCFG_ERR_INVALID_ARGUMENT MCP_ERR_INVALID_ARGUMENT
/* The root directory could not be read (also reported). */
#define MCPCFG_ERR_IO (-100)

#define MCPCFG_STRUCT_TYPE_URL "type.googleapis.com/google.protobuf.Struct"
#define MCPCFG_COLLECTION_ANNOTATION "mcp.istio.io/collection"

/* 1 when a file named |name| is loaded (it ends in .yaml or .yml), 0 if
 * not. */
int mcpcfg_is_yaml_name(const char *name);

/* A static description of |err|: MCPCFG_ERR_IO here, the core's otherwise. */
const char *mcpcfg_strerror(int err);

/*
 * Receives one problem: |path| of the file or directory, |line| (1-based,
 * 0 when unknown) and a one-line |message|. Pointers are valid during the
 * call only. Called synchronously from mcpcfg_loader_scan(); must not call
 * into the loader.
 */
typedef void (*mcpcfg_report_fn)(const char *path, unsigned long line,
                                 const char *message, void *user_data);

/*
 * News that is not a problem (mcpcfg_options.note), one line each:
 *  - MCPCFG_NOTE_UNKNOWN_KIND (a warning): a document whose apiVersion is
 *    in a built-in group (mcpcfg_options.builtin) but whose kind is none
 *    of that group's: "no kind VirtualServce in networking.istio.io/v1alpha3;
 *    did you mean VirtualService? served as an untyped collection" (the
 *    suggestion when a kind of the group is close); the document loads;
 *  - MCPCFG_NOTE_LOADED_AGAIN: a file whose previous read reported a
 *    problem read whole and clean: "loaded again, 2 resources".
 * Same contract as mcpcfg_report_fn.
 */
enum { MCPCFG_NOTE_UNKNOWN_KIND = 1, MCPCFG_NOTE_LOADED_AGAIN = 2 };
typedef void (*mcpcfg_note_fn)(int what, const char *path, unsigned long line,
                               const char *message, void *user_data);

/* A document kind whose body is a message (typed bodies). */
typedef struct mcpcfg_kind_type {
  const char *api_version; /* as written: "networking.istio.io/v1alpha3" */
  const char *kind;        /* "VirtualService" */
  const char *message;     /* "istio.networking.v1alpha3.VirtualService" */
} mcpcfg_kind_type;

typedef struct mcpcfg_options {
  mcpcfg_report_fn report; /* NULL: problems are not reported */
  void *user_data;
  size_t max_file_size; /* bytes; default 16 MiB */
  unsigned max_depth;   /* nesting of mappings and sequences; default 64 */
  size_t max_nodes;     /* per document, aliases expanded; default 1 Mi */
  /* The resource naming rules documents must follow ("Limits" above);
   * mcpcfg_options_default() sets MCP_NAMES_KUBERNETES. Taken as given
   * (0 is MCP_NAMES_LENIENT, mcp-source's --names permissive). */
  mcp_name_rules name_rules;
  /* Keep each document's source text (mcpcfg_loader_text()); 0 by
   * default: it doubles what a document costs. */
  int keep_text;
  /* Typed bodies, borrowed (they must outlive the loader). The first entry
   * of |kinds| that matches a document's apiVersion and kind gives its
   * message; every message must be in |schema| (mcpcfg_loader_new() checks
   * it). No match, |schema| NULL or |force_struct|: a Struct body. */
  const mcp_schema *schema;
  const mcpcfg_kind_type *kinds;
  size_t nkinds;
  int force_struct;
  mcpcfg_note_fn note; /* NULL: news is not reported */
  /* The kinds of the built-in groups (Istio's, swarmkit's), borrowed: all
   * the kinds those groups have. A document of one of these groups (any
   * version) whose kind is none of theirs is a MCPCFG_NOTE_UNKNOWN_KIND,
   * most likely a typo. NULL: no such warning. */
  const mcpcfg_kind_type *builtin;
  size_t nbuiltin;
  /* Typed specs are encoded as they are read (no tree; the file is read
   * again the usual way when the encoder gives up: docs/tools.md, "Typed
   * bodies").
   * |tree_only| 1: always the usual way (the tests compare the two). */
  int tree_only;
  /* Threads that read and parse the files of a scan that reads 64 or more
   * (the first scan of a big directory): 0, one per CPU the process may
   * run on (its affinity; at most 16); 1, the caller's thread alone. With
   * more than one, |schema| and its allocator are used from those threads
   * at once (read only; libc's allocator, or a thread-safe one). Reports and notes are given on the
   * caller's thread, in path order, whatever the threads. */
  unsigned load_threads;
  /* Starts one of those threads as pthread_create() does (0, or an error
   * number); NULL: pthread_create(). A thread that does not start is one
   * fewer: the others and the caller read its share (tests fail it). */
  int (*start_thread)(pthread_t *tid, void *(*fn)(void *), void *arg);
} mcpcfg_options;

/* Fills |opts| with the defaults. */
void mcpcfg_options_default(mcpcfg_options *opts);

/*
 * The plural of |kind| used in collection names: lower-cased; consonant +
 * "y" -> "ies"; ending in s, x, z, ch or sh -> + "es"; else + "s"; a kind
 * that is plural already (Kubernetes' Endpoints) is only lower-cased.
 * Returns a string the caller frees with free(), or NULL when out of memory.
 */
char *mcpcfg_plural(const char *kind);

/*
 * Sets |*pcollection| to the collection of |api_version| and |kind| (rules
 * above: the core's mcp_collection_for_kind(), which also maps Istio's newer
 * versions of its types to their canonical collections, e.g.
 * networking.istio.io/v1 VirtualService to
 * istio/networking/v1alpha3/virtualservices); the caller frees it with free(). On failure |*pcollection| is
 * untouched. Errors: NOMEM; INVALID_ARGUMENT when an argument is empty, the
 * apiVersion has more than one '/', or a part has a character outside
 * [A-Za-z0-9._-].
 */
int mcpcfg_collection_for(const char *api_version, const char *kind,
                          char **pcollection);

/*
 * Parses an RFC 3339 date-time ("2024-01-02T03:04:05Z", fractional seconds
 * (beyond nanoseconds truncated), "+01:00" offsets, 't'/'z'/' ' accepted;
 * years 0001-9999; no leap second) into UTC seconds since the epoch and
 * nanoseconds. On failure the outputs are untouched. Errors:
 * INVALID_ARGUMENT.
 */
int mcpcfg_parse_time(const char *s, int64_t *seconds, int32_t *nanos);

typedef struct mcpcfg_loader mcpcfg_loader;

/*
 * Creates a loader for the directory |dir| (copied; not read yet). |opts|
 * is copied; NULL means the defaults, and a zero limit means its default.
 * On failure |*ploader| is untouched. Errors: NOMEM, INVALID_ARGUMENT
 * (empty |dir|; a kind's message not in opts->schema).
 */
int mcpcfg_loader_new(mcpcfg_loader **ploader, const char *dir,
                      const mcpcfg_options *opts);

/* Frees the loader and everything it returned. NULL is a no-op. */
void mcpcfg_loader_del(mcpcfg_loader *loader);

/*
 * Declares |collection|, so that it is listed (and applied) even when no
 * document provides a resource for it. Declaring it again is a no-op.
 * On failure nothing changed. Errors: NOMEM, INVALID_ARGUMENT (empty).
 */
int mcpcfg_loader_declare(mcpcfg_loader *loader, const char *collection);

/*
 * Reads the directory and brings the current set of resources up to date,
 * reporting problems as it goes. A problem is reported once: a file's until
 * its bytes change, a directory's (loop, unreadable, the root missing) until
 * a scan no longer finds it. Returns 1 when the set may have changed (a file
 * was added, changed or removed), 0 when no file changed.
 * Errors: NOMEM; IO (the root directory cannot be opened or read, or is not
 * a directory; a subdirectory that cannot be read is only reported and its
 * files keep what they had). On failure the current set is unchanged
 * (problems may have been reported).
 */
int mcpcfg_loader_scan(mcpcfg_loader *loader);

/*
 * What mcpcfg_loader_scan() does, for the files |paths| only (|n| distinct
 * paths, each spelt as the walk spells it: the root as given, '/', the
 * names below it), without walking the directory: a watcher's report that
 * these files changed (created, written, renamed, deleted). A path that is
 * not below the root, not a YAML name or has a hidden component is
 * ignored; a path that is now a directory makes it a full scan. Costs the
 * changed files and the collections their documents are in (a duplicate
 * name or a new collection: a merge of every file, as a scan). Same
 * returns, reports and failure atomicity as mcpcfg_loader_scan(), whose
 * periodic walks are still needed for what no watcher reports.
 */
int mcpcfg_loader_update(mcpcfg_loader *loader, const char *const *paths,
                         size_t n);

/*
 * Files being written (a watcher saw them modified and not yet closed):
 * while |fn| returns 1 for a file's path, scans and updates do not read it
 * and it keeps what it had (a new file has nothing yet), so that a file is
 * never served half-written. NULL: none (the default).
 */
typedef int (*mcpcfg_hold_fn)(const char *path, void *user_data);
void mcpcfg_loader_set_hold(mcpcfg_loader *loader, mcpcfg_hold_fn fn,
                            void *user_data);

/* The files of the current set whose last read reported a problem (could
 * not be read, too large, not YAML, or a document skipped), until their
 * bytes change and read clean. Duplicates and directory problems are not
 * counted. */
size_t mcpcfg_loader_files_with_errors(const mcpcfg_loader *loader);

/*
 * The collections known, sorted by name: declared ones, and every collection
 * a document has ever provided (a collection whose documents all went away
 * stays listed, empty, so that applying empties it in the store). Names are
 * valid until mcpcfg_loader_del(); an |i| out of range gives NULL.
 */
size_t mcpcfg_loader_collection_count(const mcpcfg_loader *loader);
/* A number that changes whenever collection |i|'s resources do (a scan
 * that left its documents as they were leaves it), for whoever follows the
 * loader collection by collection (etcdpub). */
uint64_t mcpcfg_loader_collection_gen(const mcpcfg_loader *loader, size_t i);

const char *mcpcfg_loader_collection_name(const mcpcfg_loader *loader,
                                          size_t i);

/*
 * Sets |*res| to the current resources of the i-th collection, sorted by
 * name, and returns their number (|*res| is NULL when 0). Everything
 * |*res| points to belongs to the loader and is valid until the next
 * mcpcfg_loader_scan() or mcpcfg_loader_declare().
 */
size_t mcpcfg_loader_resources(const mcpcfg_loader *loader, size_t i,
                               const mcp_resource **res);

/* With opts.keep_text: the source text of the document resource |k| of
 * collection |i| comes from (in mcpcfg_loader_resources()' order), exactly
 * as in its file, |*len| bytes (not NUL-terminated); NULL without it. Valid
 * until the next scan. For publishing the documents elsewhere (etcd). */
const char *mcpcfg_loader_text(const mcpcfg_loader *loader, size_t i,
                               size_t k, size_t *len);

/* The current resource |name| of |collection|, or NULL. Same lifetime as
 * mcpcfg_loader_resources(). */
const mcp_resource *mcpcfg_loader_find(const mcpcfg_loader *loader,
                                       const char *collection,
                                       const char *name);

/*
 * Makes |store| serve the current set: for every collection that changed
 * since the last successful apply (all of them the first time),
 * mcp_store_add_collection() then mcp_store_replace() with its resources
 * (none for a collection whose documents went away). So a scan that
 * changed one file costs one collection, not the whole tree, and a
 * collection that only mcpcfg_loader_update() changed since the last apply
 * costs the resources it changed (mcp_store_upsert()/mcp_store_delete()
 * each, not a replace of the collection); the loader
 * therefore feeds one store, which nothing else changes. Unchanged content
 * leaves the store unchanged. Returns the number of collections that
 * changed. Errors: those of the core (NOMEM, INVALID_ARGUMENT); on failure
 * the collections before the failing one were applied, and applying again
 * converges.
 */
int mcpcfg_loader_apply(mcpcfg_loader *loader, mcp_store *store,
                        mcp_tstamp ts);

/* Reads dropped since the loader was created because the file changed
 * while it was read (Reading, above): for metrics. */
unsigned long mcpcfg_loader_unstable_reads(const mcpcfg_loader *loader);

#endif /* MCPCFG_CONFIG_LOAD_H */
