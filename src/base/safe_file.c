#include "safe_file.h"
#include "msgtext.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

// A path inside a message, escaped and shortened so that the reason after it always fits.
#define SHOWN(p) msg_text((p), (char[MSG_TEXT]){0}, MSG_TEXT)

#define TRACKED_MAX 64
static _Atomic(const char *) tracked[TRACKED_MAX];
static atomic_int helper_pid;

int safe_track(const char *path) {
    for (int i = 0; i < TRACKED_MAX; i++) {
        const char *none = NULL;
        if (atomic_compare_exchange_strong(&tracked[i], &none, path)) return 0;
    }
    return -1;
}

void safe_untrack(const char *path) {
    for (int i = 0; i < TRACKED_MAX; i++) {
        const char *mine = path;
        if (atomic_compare_exchange_strong(&tracked[i], &mine, NULL)) return;
    }
}

void safe_track_helper(int pid) { atomic_store(&helper_pid, pid); }

// Only async-signal-safe calls: kill, waitpid, unlink, rmdir, signal, raise. The helper is reaped
// here, so that it is gone, not a zombie, when micro's own death is reported.
static void on_signal(int sig) {
    const int pid = atomic_load(&helper_pid);
    if (pid > 0 && kill(pid, SIGKILL) == 0) waitpid(pid, NULL, 0);
    for (int i = 0; i < TRACKED_MAX; i++) {
        const char *p = atomic_load(&tracked[i]);
        if (p) unlink(p);
    }
    for (int i = 0; i < TRACKED_MAX; i++) {
        const char *p = atomic_load(&tracked[i]);
        if (p) rmdir(p);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

void safe_cleanup_on_signals(void) {
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) {
        struct sigaction sa = {0}, old;
        // A signal the caller chose to ignore (nohup, a shell's background job) stays ignored.
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

// The target a write really replaces: a symbolic link is followed, so that the file it names is
// updated and the link itself survives (renaming over it would swap the link for a copy).
static char *resolve_target(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        char *real = realpath(path, NULL);
        if (!real) snprintf(err, errlen, "cannot write %s: a symbolic link to nothing (%s)", SHOWN(path), strerror(errno));
        return real;
    }
    char *copy = strdup(path);
    if (!copy) snprintf(err, errlen, "cannot write %s: out of memory", SHOWN(path));
    return copy;
}

// The folder a path is in ("." for a bare name), malloc'ed.
static char *folder_of(const char *path) {
    char *copy = strdup(path);
    if (!copy) return NULL;
    char *dir = strdup(dirname(copy));
    free(copy);
    return dir;
}

int safe_check_output(const char *path, char *err, size_t errlen) {
    if (!path || !*path) {
        snprintf(err, errlen, "an output path is empty");
        return -1;
    }
    if (path[strlen(path) - 1] == '/') {
        snprintf(err, errlen, "cannot write %s: a file's name cannot end in '/'", SHOWN(path));
        return -1;
    }
    char *target = resolve_target(path, err, errlen);
    if (!target) return -1;
    struct stat st;
    int status = -1;
    if (stat(target, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            snprintf(err, errlen, "cannot write %s: is a directory", SHOWN(path));
        else if (!S_ISREG(st.st_mode))
            snprintf(err, errlen, "cannot write %s: not a regular file (refusing to replace a device, FIFO or socket)",
                     SHOWN(path));
        else
            status = 0;
    } else if (errno != ENOENT) {
        snprintf(err, errlen, "cannot write %s: %s", SHOWN(path), strerror(errno));
    } else {
        status = 0;
    }
    if (status == 0) {
        char *dir = folder_of(target);
        if (!dir) {
            snprintf(err, errlen, "cannot write %s: out of memory", SHOWN(path));
            status = -1;
        } else if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "cannot write %s: the folder %s does not exist", SHOWN(path), SHOWN(dir));
            status = -1;
        } else if (access(dir, W_OK | X_OK) != 0) {
            snprintf(err, errlen, "cannot write %s: %s", SHOWN(path), strerror(errno));
            status = -1;
        }
        free(dir);
    }
    free(target);
    return status;
}

// Opens without blocking (a FIFO would wait for a writer forever), then checks what was opened,
// not what the name pointed to a moment before.
static int open_regular(const char *path, long long *size, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", SHOWN(path), strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: cannot open: %s", SHOWN(path), strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: is a directory, not a file", SHOWN(path));
    } else if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: is not a regular file", SHOWN(path));
    } else {
        if (size) *size = (long long)st.st_size;
        int flags = fcntl(fd, F_GETFL);
        if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
        return fd;
    }
    close(fd);
    return -1;
}

// The folder a path's last name sits in, by its device and inode.
static int stat_folder(const char *path, struct stat *st) {
    char *dir = folder_of(path);
    const int rc = dir ? stat(dir, st) : -1;
    free(dir);
    return rc;
}

int safe_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    const int has_a = stat(a, &sa) == 0, has_b = stat(b, &sb) == 0;
    if (has_a && has_b) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (has_a || has_b) return 0;
    // Neither written yet: the same name in the same folder, however each path spells it.
    char *ca = strdup(a), *cb = strdup(b);
    int same = 0;
    if (ca && cb && !strcmp(basename(ca), basename(cb)) && stat_folder(a, &sa) == 0 && stat_folder(b, &sb) == 0)
        same = sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    free(ca), free(cb);
    return same;
}

int safe_check_input(const char *path, char *err, size_t errlen) {
    if (!path || !*path) {
        snprintf(err, errlen, "an input path is empty");
        return -1;
    }
    int fd = open_regular(path, NULL, err, errlen);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

FILE *safe_open_read(const char *path, long long *size, char *err, size_t errlen) {
    if (!path || !*path) {
        snprintf(err, errlen, "an input path is empty");
        return NULL;
    }
    int fd = open_regular(path, size, err, errlen);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", SHOWN(path), strerror(errno));
        close(fd);
    }
    return f;
}

// The stream writes through this sink, so the first failing write's errno (ENOSPC, EFBIG, EIO) is
// kept for the report: stdio's error flag alone does not say why.
typedef struct {
    int fd;
    int error;
} Sink;

static ssize_t sink_write(void *cookie, const char *buf, size_t n) {
    Sink *k = cookie;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(k->fd, buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (!k->error) k->error = w < 0 ? errno : EIO;
            return 0; // fopencookie: 0 is an error, the stream's flag is set
        }
        done += (size_t)w;
    }
    return (ssize_t)done;
}

static int sink_close(void *cookie) {
    Sink *k = cookie;
    int rc = close(k->fd);
    if (rc != 0 && !k->error) k->error = errno;
    return rc;
}

static void release(SafeFile *s) {
    if (s->tmp) safe_untrack(s->tmp);
    free(s->path);
    free(s->tmp);
    free(s->sink);
    s->f = NULL;
    s->path = s->tmp = NULL;
    s->sink = NULL;
}

int safe_open(SafeFile *s, const char *path, char *err, size_t errlen) {
    s->f = NULL;
    s->tmp = NULL;
    s->sink = NULL;
    if (safe_check_output(path, err, errlen)) {
        s->path = NULL;
        return -1;
    }
    s->path = resolve_target(path, err, errlen);
    if (!s->path) return -1;
    size_t n = strlen(s->path) + sizeof ".tmp-XXXXXX";
    s->tmp = malloc(n);
    if (!s->tmp) {
        snprintf(err, errlen, "cannot write %s: out of memory", SHOWN(path));
        release(s);
        return -1;
    }
    snprintf(s->tmp, n, "%s.tmp-XXXXXX", s->path);
    // Tracked before it exists, so that no signal can come between its creation and its tracking.
    safe_track(s->tmp);
    int fd = mkstemp(s->tmp);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: %s", SHOWN(path), strerror(errno));
        release(s);
        return -1;
    }
    // mkstemp makes the file private (0600); give it the mode the target has, or a new file's.
    struct stat st;
    mode_t mode;
    if (stat(s->path, &st) == 0) {
        mode = st.st_mode & 07777;
    } else {
        mode_t mask = umask(0);
        umask(mask);
        mode = 0666 & ~mask;
    }
    fchmod(fd, mode);
    Sink *k = calloc(1, sizeof *k);
    if (k) {
        k->fd = fd;
        s->sink = k;
        s->f = fopencookie(k, "wb", (cookie_io_functions_t){.write = sink_write, .close = sink_close});
    }
    if (!s->f) {
        snprintf(err, errlen, "cannot write %s: %s", SHOWN(path), strerror(errno));
        close(fd);
        unlink(s->tmp);
        release(s);
        return -1;
    }
    return 0;
}

void safe_abort(SafeFile *s) {
    if (s->f) fclose(s->f); // closes the descriptor too
    if (s->tmp) unlink(s->tmp);
    release(s);
}

// Makes the rename itself durable; folders that cannot be fsynced (some file systems) are no error.
static void sync_folder(const char *path) {
    char *dir = folder_of(path);
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

int safe_commit(SafeFile *s, char *err, size_t errlen) {
    Sink *k = s->sink;
    int e = 0;
    if (fflush(s->f) != 0 || ferror(s->f)) e = k->error ? k->error : EIO;
    if (!e && fsync(k->fd) != 0 && errno != EINVAL) e = errno; // EINVAL: a file system without fsync
    if (fclose(s->f) != 0 && !e) e = k->error ? k->error : EIO;
    s->f = NULL;
    // The target is checked again at the end: a slow writer (a figure) gives time to put a FIFO,
    // a device or a folder in its place, which must not be replaced either.
    struct stat st;
    const int replaced = !e && lstat(s->path, &st) == 0 && !S_ISREG(st.st_mode);
    if (replaced) e = EEXIST;
    if (!e && rename(s->tmp, s->path) != 0) e = errno;
    if (e) {
        if (replaced)
            snprintf(err, errlen, "cannot write %s: it is no longer a regular file (not replaced)", SHOWN(s->path));
        else
            snprintf(err, errlen, "cannot write %s: %s", SHOWN(s->path), strerror(e));
        unlink(s->tmp);
        release(s);
        return -1;
    }
    sync_folder(s->path);
    release(s);
    return 0;
}

int safe_write(const char *path, SafeWriter write, void *ctx, char *err, size_t errlen) {
    SafeFile s;
    if (safe_open(&s, path, err, errlen)) return -1;
    char why[256] = "";
    if (write(s.f, ctx, why, sizeof why) != 0 && !ferror(s.f)) {
        // The writer failed for its own reason, not the stream's.
        snprintf(err, errlen, "cannot write %s: %s", SHOWN(path), why[0] ? why : "the writer failed");
        safe_abort(&s);
        return -1;
    }
    return safe_commit(&s, err, errlen);
}

int safe_check_stdout(char *err, size_t errlen) {
    // A write that failed earlier left the error flag, and usually unwritten bytes whose second
    // flush gives the reason again (ENOSPC on /dev/full); when it does not, say so plainly.
    errno = 0;
    int flushed = fflush(stdout) == 0;
    int e = flushed ? 0 : errno;
    if (flushed && !ferror(stdout)) return 0;
    if (e)
        snprintf(err, errlen, "cannot write standard output: %s", strerror(e));
    else
        snprintf(err, errlen, "cannot write standard output: a write failed");
    return -1;
}
