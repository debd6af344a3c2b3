/*
 * mcp-sink's --out DIR: a mirror of what the sink holds, one file per
 * resource, DIR/<collection>/<name>.json (the slashes of both become
 * directories), holding tool_resource_json() of the resource.
 *
 * Files are written atomically: a temporary file ".mcp-sink-tmp-XXXXXX" in
 * the same directory, then rename(2) (no fsync: readers never see a partial
 * file, but a crash may lose the latest writes). A resource whose version is
 * the one last written is not rewritten. A removed resource's file is
 * deleted, with the directories its name created once they are empty.
 *
 * The first complete change of a collection after start (mcp_change.complete:
 * a full state, or the first push of a sink that held nothing) also deletes
 * every other *.json file below DIR/<collection> (what an earlier run left), except
 * below the directory of another requested collection: from then on the
 * directory holds exactly the collection.
 *
 * File names: a name segment longer than 200 bytes (a file name holds 255,
 * and Kubernetes subdomains reach 253) is written as its first 150 bytes
 * (fewer when that would cut a UTF-8 character), "~" and the 64 hex digits
 * of the segment's SHA-256: 212 to 215 bytes. A segment of at most 200
 * bytes is written as it is, so the mapping is injective (short and
 * mapped names differ in length; mapped ones by the hash of the whole
 * segment) and a name the sink holds is never NACKed for its length.
 *
 * Names must stay inside DIR: a resource name that is not tool_path_safe()
 * rejects the whole change. A removed name that is not safe is ignored: no
 * change carrying it was ever accepted, so there is no file (an incremental
 * push lists it when the resource came and went since the sink's last ACK).
 *
 * Not thread-safe: used from the sink's apply callback only.
 */
#ifndef TOOLS_MIRROR_H
#define TOOLS_MIRROR_H

#include <stddef.h>

#include <mcp/mcp.h>
#include <mcp/schema.h>

typedef struct tool_mirror tool_mirror;

/*
 * Creates DIR (and its parents) if needed and a mirror of the collections
 * |colls| (each must be tool_path_safe()). Returns 0, or -1 with the reason
 * in |err|.
 */
int tool_mirror_new(tool_mirror **pm, const char *dir,
                    const char *const *colls, size_t ncolls, char *err,
                    size_t errlen);

void tool_mirror_del(tool_mirror *m);

/*
 * The path, relative to DIR/<collection> and without ".json", of the file
 * of resource |name| (which must be tool_path_safe()): long segments
 * mapped as above. malloc'd, or NULL when out of memory.
 */
char *tool_mirror_file_of(const char *name);

/* Bodies of the message types of |schema| (borrowed; it must outlive the
 * mirror) are written as their proto3 JSON (tool_resource_json()). */
void tool_mirror_set_schema(tool_mirror *m, const mcp_schema *schema);

/*
 * Applies one accepted-to-be change: returns 0 when the files are written
 * (or the collection is not mirrored), else a google.rpc code for the
 * sink's NACK and a message in |msg|: INVALID_ARGUMENT for an unsafe name or
 * a body that cannot be converted (nothing was written), INTERNAL when a
 * file could not be written (files written before the failure stay).
 */
int tool_mirror_apply(tool_mirror *m, const mcp_change *ch, char *msg,
                      size_t msglen);

#endif /* TOOLS_MIRROR_H */
