/*
 * Watches a directory tree with Linux inotify (on the libuv loop): one watch
 * per directory (inotify is not recursive), kept in step with the tree by
 * tool_watch_sync(); a directory watch reports the events of each file in
 * it, by name. Names starting with '.' are not descended into (the loader
 * ignores them too), except that the root itself is always watched, which
 * sees a Kubernetes ConfigMap's "..data" swap. Symbolic links to
 * directories are followed; a directory reached twice is watched once.
 *
 * Events are interpreted, so that a change costs the file it touched, and
 * so that a file is read only once its writer is done with it:
 *   - a YAML file (*.yaml, *.yml) closed after writing (IN_CLOSE_WRITE),
 *     renamed into place (IN_MOVED_TO: Kubernetes and careful writers
 *     rename), renamed away, deleted, or whose attributes changed, is
 *     *final*: it is reported at once in the batch's |paths|;
 *   - a YAML file modified (IN_MODIFY) or created as a regular file
 *     (IN_CREATE) is *being written*: it is not reported; it becomes final
 *     at its close or rename, or, when no close comes (a writer that keeps
 *     it open, an mmap writer), once its size and mtime have not changed
 *     for |settle_ms| (sampled every settle_ms / 4). Meanwhile
 *     tool_watch_writing() says so, for the periodic rescan to hold it;
 *   - what only a walk can tell (a directory created, removed or renamed, a
 *     hidden name such as ConfigMap's "..data" swapped, a symbolic link
 *     created, a watch lost, the event queue overflowing) sets |rescan|;
 *     so does every file event when the tree reaches a directory by two
 *     paths or a YAML name is a symbolic link (a file then has several
 *     names, and only a walk finds them all);
 *   - other names (not YAML) are ignored.
 * Changes inotify cannot see (files behind symbolic links that point out of
 * the tree, network file systems) need a periodic rescan as well.
 */
#ifndef TOOLS_WATCH_H
#define TOOLS_WATCH_H

#include <stddef.h>

#include <uv.h>

typedef struct tool_watch tool_watch;

/* One batch of events (all those one read of the inotify queue returned,
 * or one settle tick): |paths| (|n|, distinct, sorted, each "DIR/NAME" as
 * the walk from the root spells it) are final and to be read again; |rescan| asks for a walk
 * of the whole tree. A batch with neither says that a file began being
 * written (for metrics). Pointers are valid during the call only. Called on
 * the loop's thread; may call tool_watch_sync() and tool_watch_writing(). */
typedef void (*tool_watch_cb)(const char *const *paths, size_t n, int rescan,
                              void *user_data);

/* What the watcher saw, for metrics (counters since it was created). */
typedef struct tool_watch_stats {
  unsigned long long closed;   /* IN_CLOSE_WRITE of a YAML file */
  unsigned long long moved;    /* IN_MOVED_TO of a YAML file */
  unsigned long long modified; /* IN_MODIFY/IN_CREATE: being written */
  unsigned long long settled;  /* being written, final by the settle rule */
  unsigned long long rescans;  /* batches that asked for a walk */
  size_t writing;              /* files being written now */
} tool_watch_stats;

/* Creates a watcher for |root| (copied) on |loop|; watches nothing until
 * tool_watch_sync(). |settle_ms| (> 0): see "being written" above.
 * Returns 0, -1 when out of memory, or a negative errno when inotify is
 * not available. */
int tool_watch_new(tool_watch **pw, uv_loop_t *loop, const char *root,
                   unsigned settle_ms, tool_watch_cb cb, void *user_data);

/* Walks the tree: starts watching new directories (and directories
 * replaced by another one under the same path), stops watching those gone.
 * A directory that cannot be watched is reported once (warning). */
void tool_watch_sync(tool_watch *w);

/* NULL when inotify sees every change the last tool_watch_sync() can
 * know of: the root and each directory it reached have a watch, no YAML
 * name is a symbolic link (whose target may lie outside the watched tree),
 * and every directory is on a file system known to be local (ext4, xfs,
 * btrfs, tmpfs, overlayfs, ...: changed only through this kernel). Else
 * why not, in words (static, or written into |buf| of |len| bytes): then
 * only a periodic rescan finds some changes. */
const char *tool_watch_blind(const tool_watch *w, char *buf, size_t len);
/* 1 when |path| (spelt as in the batches) is being written: modified or
 * created, and not closed, renamed or settled since. */
int tool_watch_writing(const tool_watch *w, const char *path);

void tool_watch_get_stats(const tool_watch *w, tool_watch_stats *st);

/* Stops every handle and frees the watcher once libuv has closed them (run
 * the loop afterwards). NULL is a no-op. */
void tool_watch_close(tool_watch *w);

#endif /* TOOLS_WATCH_H */
