/*
 * Watches a directory tree with libuv: one uv_fs_event handle per directory
 * (Linux inotify is not recursive), kept in step with the tree by
 * tool_watch_sync(). Names starting with '.' are not descended into (the
 * loader ignores them too), except that the root itself is always watched,
 * which sees a Kubernetes ConfigMap's "..data" swap. Symbolic links to
 * directories are followed; a directory reached twice is watched once.
 *
 * Events are not interpreted: any change calls |cb|, and the caller rescans.
 * Changes inotify cannot see (files behind symbolic links that point out of
 * the tree, network file systems) need a periodic rescan as well.
 */
#ifndef TOOLS_WATCH_H
#define TOOLS_WATCH_H

#include <uv.h>

typedef struct tool_watch tool_watch;

typedef void (*tool_watch_cb)(void *user_data);

/* Creates a watcher for |root| (copied) on |loop|; watches nothing until
 * tool_watch_sync(). Returns 0, or -1 when out of memory. */
int tool_watch_new(tool_watch **pw, uv_loop_t *loop, const char *root,
                   tool_watch_cb cb, void *user_data);

/* Walks the tree: starts watching new directories (and directories
 * replaced by another one under the same path), stops watching those gone.
 * A directory that cannot be watched is reported once (warning). */
void tool_watch_sync(tool_watch *w);

/* Stops every handle and frees the watcher once libuv has closed them (run
 * the loop afterwards). NULL is a no-op. */
void tool_watch_close(tool_watch *w);

#endif /* TOOLS_WATCH_H */
