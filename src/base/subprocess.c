#include "subprocess.h"
#include "safe_file.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int spawn_wait(char *const argv[], const char *out_path, const char *err_path, char *err, size_t errlen) {
    posix_spawn_file_actions_t actions;
    if (posix_spawn_file_actions_init(&actions) != 0) {
        snprintf(err, errlen, "%s: cannot start: out of memory", argv[0]);
        return -1;
    }
    const int wr = O_WRONLY | O_CREAT | O_TRUNC;
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path ? out_path : "/dev/null", wr, 0600);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path ? err_path : "/dev/null", wr, 0600);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
        snprintf(err, errlen, "%s: cannot start: %s", argv[0], strerror(rc));
        return -1;
    }
    safe_track_helper(pid);
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            safe_track_helper(0);
            snprintf(err, errlen, "%s: cannot wait for it: %s", argv[0], strerror(errno));
            return -1;
        }
    }
    safe_track_helper(0);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    snprintf(err, errlen, "%s: killed by signal %d", argv[0], WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return -1;
}

int spawn_find(const char *name, char *buf, size_t n) {
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        const size_t len = end ? (size_t)(end - path) : strlen(path);
        // An empty entry means the current folder, as for the shell.
        const int w = len ? snprintf(buf, n, "%.*s/%s", (int)len, path, name) : snprintf(buf, n, "./%s", name);
        if (w > 0 && (size_t)w < n && access(buf, X_OK) == 0) return 0;
        path += len;
        if (*path == ':') path++;
    }
    return -1;
}
