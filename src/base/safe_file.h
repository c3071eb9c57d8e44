// Every file micro reads or writes goes through here, so that no write is ever half-done under its
// real name and no read ever blocks on a FIFO or mistakes a folder for a file.
//
// Writing: safe_open creates a temporary file beside the target (same folder, so the final rename
// is atomic), the caller writes to the FILE*, and safe_commit flushes, fsyncs, checks every error
// and renames over the target; on any failure the temporary is removed and the target is left as
// it was. A crash or a kill in mid-write leaves at most a stray "PATH.tmp-XXXXXX" beside it.
//
// Errors are one line in err, "cannot write PATH: reason" (the caller prints "micro: " + err and
// exits 1). Path checks meant to run before any work (exit 2) say what is wrong with the path.
#ifndef MICRO_SAFE_FILE_H
#define MICRO_SAFE_FILE_H

#include <stdio.h>

typedef struct {
    FILE *f;     // write here between safe_open and safe_commit / safe_abort
    char *path;  // the target (its symbolic link resolved)
    char *tmp;   // the temporary beside it
    void *sink;  // the descriptor under f and the first write error (errno), for the report
} SafeFile;

// An output path micro may write: not empty, and if it exists a regular file (a device node, FIFO
// or folder is refused rather than replaced); its folder must exist. 0, or -1 with err set.
int safe_check_output(const char *path, char *err, size_t errlen);
// Whether two paths name one file: the same device and inode where both exist; where neither does
// yet, the same last name in the same folder (so "m.bin" and "./m.bin" are one output). An output
// is checked against the inputs and the other outputs with it, never by comparing the strings.
int safe_same_file(const char *a, const char *b);
// An input path: it must name a regular file (a FIFO would block forever, a folder has no size).
int safe_check_input(const char *path, char *err, size_t errlen);
// Opens an input after the same check, without blocking on a FIFO even if one is swapped in
// between; *size gets its length. NULL with err set ("PATH: reason") on failure.
FILE *safe_open_read(const char *path, long long *size, char *err, size_t errlen);

// Starts writing path (after safe_check_output). 0, or -1 with err set and nothing to clean up.
int safe_open(SafeFile *s, const char *path, char *err, size_t errlen);
// Finishes: fflush, fsync, ferror, fclose, rename, fsync of the folder. 0, or -1 with err set and
// the temporary removed. Always releases s.
int safe_commit(SafeFile *s, char *err, size_t errlen);
// Gives up: closes and removes the temporary; the target is untouched.
void safe_abort(SafeFile *s);

// The whole cycle for a writer that takes a FILE*: check, open, write(f, ctx, why, whylen), commit.
// The writer need not check its fprintf/fwrite calls (the stream's errors are caught at the
// commit, with their errno); it returns nonzero only for a failure of its own, with the reason
// in why ("out of memory"). 0, or -1 with err set ("cannot write PATH: reason") and the target
// untouched. Export formats (llama2.c, GGUF) and plate's files are written this way.
typedef int (*SafeWriter)(FILE *f, void *ctx, char *why, size_t whylen);
int safe_write(const char *path, SafeWriter write, void *ctx, char *err, size_t errlen);

// Temporaries a signal must not leave behind. safe_open tracks its temporary until the commit or
// the abort; a private folder of figure data and the files in it are tracked by their owner. The
// handler safe_cleanup_on_signals installs (for SIGINT, SIGTERM, SIGHUP) kills the helper program
// that is running, removes every tracked file, then every tracked folder, and dies of the signal.
// A tracked path must stay valid until safe_untrack. -1 when all slots are taken (the path then
// stays untracked, which only matters if a signal comes).
int safe_track(const char *path);
void safe_untrack(const char *path);
// The helper that is running (0 for none): a signal passed to micro ends it too.
void safe_track_helper(int pid);
void safe_cleanup_on_signals(void);

// Standard output at the end of a command: flushes it and returns 0, or -1 with err set
// ("cannot write standard output: reason") when any write to it failed (a full disk, a closed pipe).
int safe_check_stdout(char *err, size_t errlen);

#endif
