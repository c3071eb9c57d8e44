// The forward kernels' entry checks (src/region_check.h), in the sanitizer test build only, where the
// kernels themselves are not instrumented: each kernel, handed a buffer one float too short, must
// stop with its line naming the kernel and the buffer, and the same call with the float there must
// run. Each short call runs in a child process, since the check aborts.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forward_kernels.h"

enum { N = 64, ROWS = 8, HD = 32 };
_Static_assert(N == KEY_PANEL, "call_scores's keys are one panel");

static const ForwardKernels *k;
static int failures;

// One kernel call, given how many floats its tested buffer holds (the rest as it needs them).
typedef void (*Call)(int floats);

static float *buffer(int floats) {
    float *p = calloc((size_t)floats, sizeof *p);
    if (!p) abort();
    return p;
}

static void call_matvec(int floats) { // W: ROWS rows of N
    float *W = buffer(floats), *x = buffer(N), *out = buffer(ROWS);
    k->matvec_rows(out, W, x, N, 0, ROWS);
    free(W), free(x), free(out);
}

static void call_matmul(int floats) { // X: 4 rows of N
    float *W = buffer(ROWS * N), *X = buffer(floats), *out = buffer(4 * ROWS);
    k->matmul_rows(out, ROWS, W, X, N, N, 4, 0, ROWS);
    free(W), free(X), free(out);
}

static void call_softmax(int floats) { // x: N
    float *x = buffer(floats);
    k->scaled_softmax(x, N, 0.5f);
    free(x);
}

static void call_scores(int floats) { // keys: N positions transposed, one panel
    float *q = buffer(SPAN_TILE * HD), *kt = buffer(floats), *out = buffer(SPAN_TILE * N);
    const int ends[] = {N, N, N, N};
    k->scores_transposed(out, N, q, HD, 4, kt, HD, 0, ends, SCORE_IN_ORDER);
    free(q), free(kt), free(out);
}

static void call_mix(int floats) { // values: N rows of HD
    float *p = buffer(SPAN_TILE * N), *v = buffer(floats), *out = buffer(SPAN_TILE * HD);
    const int ends[] = {N, N, N, N};
    k->mix_rows(out, HD, p, N, 4, v, HD, 0, ends);
    free(p), free(v), free(out);
}

// call(floats) runs; call(floats - 1), in a child, aborts with a line holding `names`.
static void expect_stop(const char *label, Call call, int floats, const char *names) {
    call(floats);
    int pipe_fd[2];
    if (pipe(pipe_fd) != 0) abort();
    fflush(stdout), fflush(stderr);
    pid_t child = fork();
    if (child < 0) abort();
    if (child == 0) {
        const struct rlimit no_core = {0, 0}; // the abort is expected: no core file (as test_safe_file's child)
        setrlimit(RLIMIT_CORE, &no_core);
        dup2(pipe_fd[1], 2);
        close(pipe_fd[0]);
        call(floats - 1);
        _exit(0); // not stopped: the parent reports it
    }
    close(pipe_fd[1]);
    char said[16384];
    size_t got = 0;
    ssize_t r;
    while ((r = read(pipe_fd[0], said + got, sizeof said - 1 - got)) > 0) got += (size_t)r;
    said[got] = '\0';
    close(pipe_fd[0]);
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT || !strstr(said, names)) {
        fprintf(stderr, "FAIL %s: a buffer one float short was not stopped (status %d): %.300s\n", label, status, said);
        failures++;
    } else {
        printf("ok   %s: one float short stops with '%s'\n", label, names);
    }
}

int main(void) {
    for (int isa = ISA_PORTABLE; isa <= ISA_AVX512; isa++) {
        if (!(k = forward_kernels_for((Isa)isa))) continue;
        printf("the %s kernels\n", k->name);
        expect_stop("matvec_rows", call_matvec, ROWS * N, "matvec_rows: W");
        expect_stop("matmul_rows", call_matmul, 4 * N, "matmul_rows: X");
        expect_stop("scaled_softmax", call_softmax, N, "scaled_softmax: x");
        expect_stop("scores_transposed", call_scores, HD * N, "scores_transposed: keys");
        expect_stop("mix_rows", call_mix, N * HD, "mix_rows: values");
    }
    return failures ? 1 : 0;
}
