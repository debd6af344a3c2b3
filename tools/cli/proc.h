/* Process set-up shared by the programs. */
#ifndef TOOLS_PROC_H
#define TOOLS_PROC_H

/*
 * Ignores SIGPIPE (a peer closing mid-write is an error return, not a
 * death) and raises the soft limit of open files to the hard limit: each
 * stream costs a descriptor, and the usual soft limit of 1024 stops a
 * source at about 1000 sinks. Logs a raise (info), a failure to raise
 * (warning) or the limit as it was (debug). Call once, after
 * tool_log_init().
 *
 * |many_peers|: the process serves many peers (it listens). With glibc,
 * its allocations of 64 KiB and more are then mapped on their own
 * (M_MMAP_THRESHOLD), so that the memory of buffers freed after a sync
 * leaves the process. A dialing process keeps glibc's threshold: gRPC
 * reads into 64 KiB slices, and mapping and unmapping each of them cost
 * a tenth of a 20 MB sync's CPU (issue 25, target 3).
 */
void tool_proc_init(int many_peers);

#endif /* TOOLS_PROC_H */
