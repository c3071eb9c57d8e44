#include "subprocess.h"

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

int spawn_wait(char *const argv[], int quiet, char *err, size_t errlen) {
    posix_spawn_file_actions_t actions;
    if (posix_spawn_file_actions_init(&actions) != 0) {
        snprintf(err, errlen, "%s: cannot start: out of memory", argv[0]);
        return -1;
    }
    if (quiet) posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
        snprintf(err, errlen, "%s: cannot start: %s", argv[0], strerror(rc));
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            snprintf(err, errlen, "%s: cannot wait for it: %s", argv[0], strerror(errno));
            return -1;
        }
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    snprintf(err, errlen, "%s: killed by signal %d", argv[0], WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return -1;
}

int spawn_in_path(const char *name) {
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    size_t nlen = strlen(name);
    while (*path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        // An empty entry means the current folder, as for the shell.
        char *full = malloc(len + nlen + 3);
        if (!full) return 0;
        if (len)
            snprintf(full, len + nlen + 3, "%.*s/%s", (int)len, path, name);
        else
            snprintf(full, len + nlen + 3, "./%s", name);
        int found = access(full, X_OK) == 0;
        free(full);
        if (found) return 1;
        path += len;
        if (*path == ':') path++;
    }
    return 0;
}
