// micro: one tiny transformer, a pluggable quantised KV cache, and what each cache width costs.
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "cpu.h"
#include "kvcache.h"
#include "msgtext.h"
#include "safe_file.h"

// OpenBLAS starts its server threads as it loads, and each spins on a core for a while before it
// sleeps. micro splits its work with its own pool and runs every product on one BLAS thread
// (train.c), so those threads would only take a core from the first runs of a command: main stops
// them at once. The call is OpenBLAS's own (it stops them before a fork); a BLAS without it leaves
// the weak reference null.
extern int blas_thread_shutdown_(void) __attribute__((weak));

#ifndef MICRO_VERSION
#define MICRO_VERSION "dev"
#endif

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"plate", cmd_plate, "the plate's tables: every cache scheme's cost in loss, and what it buys in users"},
    {"eval", cmd_eval, "held-out loss per text through a chosen KV cache, and its increase over fp32"},
    {"generate", cmd_generate, "continue a prompt byte by byte through a chosen KV cache"},
    {"inspect", cmd_inspect, "outlier channels and tokens of the cached keys and values, per layer and head"},
    {"bench", cmd_bench, "decode speed, memory roofline and attention time per cache codec"},
    {"serve-bench", cmd_serve_bench, "many conversations through one paged cache pool: users held and tokens/s per width"},
    {"capacity", cmd_capacity, "conversations that fit beside a model on a GPU at each cache width"},
    {"attention", cmd_attention, "a picture: fp32's attention beside a cache's, the most-attended positions marked"},
    {"figure", cmd_figure, "draw the figures again from a CSV micro plate or micro sweep wrote"},
    {"sweep", cmd_sweep, "a grid of cache specs on the same texts: bits, increase with its interval, top-1, KL"},
    {"calibrate", cmd_calibrate, "KVQuant's calibration: key ranges, outlier thresholds and codebooks (.kvq)"},
    {"train", cmd_train, "train micro from the corpus (batched forward/backward, AdamW)"},
    {"export", cmd_export, "write llama2.c's legacy checkpoint or a GGUF model for llama.cpp"},
    {"tokenize", cmd_tokenize, "a text's token ids as the model's own tokenizer gives them"},
};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
    fprintf(out, "usage: micro COMMAND [options]   (micro COMMAND --help for its options)\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\ncache specs (name[:key=value,...]) for --cache, --k and --v:\n");
    int n;
    const CodecFamily *const *families = codec_families(&n);
    for (int i = 0; i < n; i++) fprintf(out, "  %s\n", families[i]->help);
    fprintf(out, "and on any spec the stream transforms (their bytes counted; docs/cache-specs.md): rot=hadamard|random:SEED|none,\n"
                 "  prerope (keys), sink=N (first N tokens exact), outliers=P (a token's P%% extremes exact)\n");
    fprintf(out, "\n  -h, --help     this help\n  --version      print the version\n");
}

static int dispatch(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("micro %s\nkernels: %s; compiled in: portable%s%s; MICRO_ISA=portable|avx2|avx512 picks a lower set\n",
               MICRO_VERSION, cli_kernels(),
#ifdef MICRO_KERNELS_AVX2
               " avx2",
#else
               "",
#endif
#ifdef MICRO_KERNELS_AVX512
               " avx512"
#else
               ""
#endif
        );
        return 0;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(cmd, commands[i].name)) {
            // A kernel set the environment asks for and this CPU cannot run is refused before any
            // work; help is printed whatever the environment says.
            char err[256];
            int help = 0;
            for (int a = 2; a < argc; a++) help |= !strcmp(argv[a], "-h") || !strcmp(argv[a], "--help");
            if (!help && cpu_isa_check_env(err, sizeof err)) {
                fprintf(stderr, "micro: %s\n", err);
                return 2;
            }
            return commands[i].run(argc - 1, argv + 1);
        }
    char shown[MSG_TEXT];
    fprintf(stderr, "micro: unknown command '%s'\n", msg_text(cmd, shown, sizeof shown));
    usage(stderr);
    return 2;
}

int main(int argc, char **argv) {
    if (blas_thread_shutdown_) blas_thread_shutdown_();
    // A command runs evaluation after evaluation (micro plate: 110 of them on two threads), each
    // allocating the same large buffers. Freed memory stays with the process, so the next run's
    // buffers do not fault in pages the kernel must zero again: blocks below 32 MiB (glibc's most)
    // come from the heap, and a heap's free top is not given back.
    (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
    (void)mallopt(M_TRIM_THRESHOLD, INT_MAX);
    // Output to a file or pipe in one write where it fits (64 KB; a command that streams flushes as
    // it goes): glibc drops a buffer whose write failed, and with it the reason, so a failure in
    // the middle of a longer output left safe_check_stdout no reason to give.
    static char out_buf[1 << 16];
    if (!isatty(STDOUT_FILENO)) setvbuf(stdout, out_buf, _IOFBF, sizeof out_buf);
    // No temporary outlives micro, and no figure helper either, when it is interrupted or killed.
    safe_cleanup_on_signals();
    char err[256];
    int status = dispatch(argc, argv);
    // A result that never reached standard output (a full disk, /dev/full) is a failure, not a
    // success: every command ends here, so none can forget to check.
    if (safe_check_stdout(err, sizeof err)) {
        fprintf(stderr, "micro: %s\n", err);
        if (status == 0) status = 1;
    }
    return status;
}
