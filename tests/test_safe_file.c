// safe_file: whole files or nothing under the real name. A write that fails (a file-size limit
// gives EFBIG exactly where a full disk gives ENOSPC) reports one line and leaves the old file and
// no temporary; a process killed in mid-write (SIGXFSZ at the limit, deterministic) leaves the
// previous checkpoint loadable; paths that are not regular files are refused, never replaced.
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "safe_file.h"
#include "checkpoint.h"

static char dir[] = "/tmp/micro-safe-file-XXXXXX";

// Files in the test folder other than the expected ones: leftovers of a failed write.
static int count_files(void) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

static int write_text(FILE *f, void *ctx, char *why, size_t whylen) {
    (void)why, (void)whylen;
    fputs(ctx, f);
    return 0;
}

// A writer that fails for its own reason halfway: nothing may reach the real name.
static int write_then_fail(FILE *f, void *ctx, char *why, size_t whylen) {
    fputs(ctx, f);
    snprintf(why, whylen, "out of memory");
    return -1;
}

static char *slurp(const char *path, long *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)*len + 1);
    if (buf && fread(buf, 1, (size_t)*len, f) != (size_t)*len) *len = -1;
    fclose(f);
    return buf;
}

// A checkpoint of n parameters whose values depend on seed.
// A checkpoint the loader accepts: a run of a model of about n parameters.
static Checkpoint make_checkpoint(int64_t n, float seed) {
    Checkpoint c;
    memset(&c, 0, sizeof c);
    ModelConfig cfg = model_config_micro();
    cfg.dim = 64, cfg.n_heads = cfg.n_kv_heads = 2, cfg.head_dim = 32, cfg.n_layers = 1, cfg.max_seq_len = 64;
    cfg.hidden_dim = (int)((n - 260 * 64 - 4 * 64 * 64) / (3 * 64)); // the rest in the feed-forward
    n = (int64_t)model_param_count(&cfg);
    checkpoint_ident_model(&c.id, &cfg);
    c.id.batch = c.id.seq = c.id.val_windows = 1;
    c.id.steps = 10;
    c.pr.n_params = n;
    c.pr.step = 3;
    c.params = malloc((size_t)n * sizeof(float));
    c.m = malloc((size_t)n * sizeof(float));
    c.v = malloc((size_t)n * sizeof(float));
    c.train_loss = calloc(10, sizeof(float));
    c.val = calloc(1, sizeof(ValRecord));
    for (int64_t i = 0; i < n; i++) c.params[i] = c.m[i] = c.v[i] = seed + (float)i;
    return c;
}

static void set_fsize(rlim_t soft) {
    struct rlimit r;
    getrlimit(RLIMIT_FSIZE, &r);
    r.rlim_cur = soft;
    setrlimit(RLIMIT_FSIZE, &r);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    char path[256], other[256], err[512];
    snprintf(path, sizeof path, "%s/file.txt", dir);

    // A plain write: the content, the usual mode, no temporary left.
    CHECK(safe_write(path, write_text, "first\n", err, sizeof err) == 0, "write: %s", err);
    long len;
    char *got = slurp(path, &len);
    CHECK(got && len == 6 && !memcmp(got, "first\n", 6), "content");
    free(got);
    struct stat st;
    mode_t mask = umask(022);
    umask(mask);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == (0666 & ~mask), "mode %o", (unsigned)(st.st_mode & 0777));
    CHECK(count_files() == 1, "a temporary left after a good write");

    // A write that fails (EFBIG under a file-size limit, SIGXFSZ ignored as a full disk would not
    // signal): -1, one line naming the path and the reason, the old file intact, no temporary.
    signal(SIGXFSZ, SIG_IGN);
    char big[8192];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    set_fsize(1000);
    int rc = safe_write(path, write_text, big, err, sizeof err);
    set_fsize(RLIM_INFINITY);
    CHECK(rc == -1, "a failed write returned %d", rc);
    CHECK(strstr(err, "cannot write") && strstr(err, path) && strstr(err, strerror(EFBIG)) && !strchr(err, '\n'),
          "message: %s", err);
    got = slurp(path, &len);
    CHECK(got && len == 6 && !memcmp(got, "first\n", 6), "the old file was touched by a failed write");
    free(got);
    CHECK(count_files() == 1, "a temporary left after a failed write");

    // A writer's own failure: its reason, the old file intact, no temporary.
    CHECK(safe_write(path, write_then_fail, "half", err, sizeof err) == -1 && strstr(err, "out of memory"),
          "writer failure: %s", err);
    got = slurp(path, &len);
    CHECK(got && len == 6 && !memcmp(got, "first\n", 6), "the old file was touched by a failed writer");
    free(got);
    CHECK(count_files() == 1, "a temporary left after a failed writer");

    // Paths that are not regular files are refused, before anything is written.
    CHECK(safe_check_output("", err, sizeof err) == -1, "empty output path accepted");
    CHECK(safe_check_output("/dev/null", err, sizeof err) == -1 && strstr(err, "not a regular file"), "/dev/null: %s", err);
    CHECK(safe_check_output("/dev/full", err, sizeof err) == -1, "/dev/full accepted");
    CHECK(safe_check_output(dir, err, sizeof err) == -1 && strstr(err, "is a directory"), "folder: %s", err);
    snprintf(other, sizeof other, "%s/no/such/file", dir);
    CHECK(safe_check_output(other, err, sizeof err) == -1 && strstr(err, "does not exist"), "missing folder: %s", err);
    SafeFile sf;
    CHECK(safe_open(&sf, "/dev/null", err, sizeof err) == -1, "safe_open replaced /dev/null");
    CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "/dev/null is no longer a device");

    // A symbolic link is written through: the file it names changes, the link stays a link.
    snprintf(other, sizeof other, "%s/link", dir);
    CHECK(symlink(path, other) == 0, "symlink");
    CHECK(safe_write(other, write_text, "second\n", err, sizeof err) == 0, "through a link: %s", err);
    CHECK(lstat(other, &st) == 0 && S_ISLNK(st.st_mode), "the link was replaced by a file");
    got = slurp(path, &len);
    CHECK(got && len == 7 && !memcmp(got, "second\n", 7), "the linked file was not updated");
    free(got);
    unlink(other);

    // A target that becomes a FIFO while its writer is busy (a figure takes seconds) is not replaced
    // at the commit, and the temporary goes; a name ending in '/' is refused before anything.
    snprintf(other, sizeof other, "%s/late", dir);
    CHECK(safe_open(&sf, other, err, sizeof err) == 0, "late: %s", err);
    fputs("figure\n", sf.f);
    CHECK(mkfifo(other, 0600) == 0, "mkfifo late");
    CHECK(safe_commit(&sf, err, sizeof err) == -1 && strstr(err, "no longer a regular file"), "late FIFO: %s", err);
    CHECK(lstat(other, &st) == 0 && S_ISFIFO(st.st_mode), "the late FIFO was replaced");
    CHECK(count_files() == 2, "a temporary left after a refused commit");
    unlink(other);
    snprintf(other, sizeof other, "%s/new.gguf/", dir);
    CHECK(safe_check_output(other, err, sizeof err) == -1 && strstr(err, "cannot end in '/'"), "trailing slash: %s", err);

    // Inputs: a FIFO is refused at once (opening it plainly blocks until a writer comes), a folder
    // too (checkpoint_load used to ask malloc for 2^63 bytes for one).
    snprintf(other, sizeof other, "%s/fifo", dir);
    CHECK(mkfifo(other, 0600) == 0, "mkfifo");
    alarm(20); // a regression would block here forever
    CHECK(safe_open_read(other, NULL, err, sizeof err) == NULL && strstr(err, "not a regular file"), "FIFO: %s", err);
    Checkpoint in;
    CHECK(checkpoint_load(other, &in, err, sizeof err) == -1, "checkpoint from a FIFO");
    CHECK(checkpoint_load(dir, &in, err, sizeof err) == -1 && strstr(err, "is a directory"), "checkpoint from a folder: %s", err);
    CHECK(safe_check_input("", err, sizeof err) == -1, "empty input path accepted");
    alarm(0);
    unlink(other);

    // A kill in mid-write of a checkpoint: the child writes a second checkpoint over the first under
    // a file-size limit of half its size, with SIGXFSZ at its default (terminate), so it dies with
    // the temporary half written. The real name must still hold the first checkpoint, whole.
    snprintf(other, sizeof other, "%s/run.ckpt", dir);
    Checkpoint a = make_checkpoint(100000, 1.0f), b = make_checkpoint(100000, 2.0f);
    CHECK(checkpoint_save(other, &a, err, sizeof err) == 0, "first checkpoint: %s", err);
    long first_len;
    char *first = slurp(other, &first_len);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_DFL);
        struct rlimit core = {0, 0};
        setrlimit(RLIMIT_CORE, &core);
        set_fsize((rlim_t)first_len / 2);
        checkpoint_save(other, &b, err, sizeof err);
        _exit(0); // not reached: the write past the limit kills the child
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ, "the child was not killed in mid-write (status %d)", status);
    got = slurp(other, &len);
    CHECK(got && first && len == first_len && !memcmp(got, first, (size_t)len), "the checkpoint under its real name changed");
    free(got);
    free(first);
    Checkpoint back;
    CHECK(checkpoint_load(other, &back, err, sizeof err) == 0 && back.params[5] == 6.0f, "previous checkpoint unloadable: %s",
          err);
    checkpoint_free_arrays(&back);
    // What the kill left: the half-written temporary beside it, never under the real name.
    DIR *d = opendir(dir);
    struct dirent *e;
    int partial = 0;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, "run.ckpt.tmp-", 13)) {
            char p[512];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            partial += stat(p, &st) == 0 && st.st_size == first_len / 2;
            unlink(p);
        }
    if (d) closedir(d);
    CHECK(partial == 1, "expected one half-written temporary, found %d", partial);
    // And the next save, unhindered, replaces it whole.
    CHECK(checkpoint_save(other, &b, err, sizeof err) == 0, "second checkpoint: %s", err);
    CHECK(checkpoint_load(other, &back, err, sizeof err) == 0 && back.params[5] == 7.0f, "second checkpoint: %s", err);
    checkpoint_free_arrays(&back);
    checkpoint_free_arrays(&a);
    checkpoint_free_arrays(&b);

    unlink(other);
    unlink(path);
    CHECK(rmdir(dir) == 0, "rmdir %s: leftovers", dir);
    if (!failures) printf("safe_file: all checks passed\n");
    return failures != 0;
}
