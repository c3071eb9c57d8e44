// The option parsers and the message helper, called directly: statuses, messages, ranges and the
// options a run receives (the CLI test sees only exit codes and stderr).
#include <string.h>

#include "check.h"
#include "cmd_options.h"
#include "msgtext.h"
#include "text.h"

#define ARGV(...) (char *[]){__VA_ARGS__, NULL}
#define ARGC(...) (int)(sizeof((char *[]){__VA_ARGS__}) / sizeof(char *))
#define BENCH(...) bench_parse(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), &b, err, sizeof err)
#define CAPACITY(...) capacity_parse(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), &c, err, sizeof err)

static void test_msg_text(void) {
    char buf[32];
    CHECK(!strcmp(msg_text("plain", buf, sizeof buf), "plain"), "plain text unchanged: %s", buf);
    CHECK(!strcmp(msg_text("a\nb\x01", buf, sizeof buf), "a\\x0Ab\\x01"), "controls escaped: %s", buf);
    CHECK(!strcmp(msg_text("4\xc3\xa9", buf, sizeof buf), "4\xc3\xa9"), "é kept whole: %s", buf);
    CHECK(!strcmp(msg_text("\xc3", buf, sizeof buf), "\\xC3"), "half a character escaped: %s", buf);
    // 40 two-byte characters into 31 bytes: head and tail of whole characters around "...".
    char zh[81] = "";
    for (int i = 0; i < 40; i++) strcat(zh, "\xc3\xa9");
    msg_text(zh, buf, sizeof buf);
    CHECK(strlen(buf) < sizeof buf && strstr(buf, "...") && utf8_first_invalid((const uint8_t *)buf, strlen(buf)) < 0,
          "shortened on character boundaries: %s", buf);
    char path[600];
    memset(path, 'p', sizeof path - 1);
    path[sizeof path - 1] = '\0';
    path[0] = '/', path[sizeof path - 2] = 'Z';
    msg_text(path, buf, sizeof buf);
    CHECK(buf[0] == '/' && buf[strlen(buf) - 1] == 'Z' && strlen(buf) == sizeof buf - 1, "head and tail kept: %s", buf);
}

static void test_bench(void) {
    BenchOptions b;
    char err[512];
    CHECK(BENCH("bench") == OPTS_RUN && b.n_positions == 3 && b.positions[2] == 2048 && !b.positions_given &&
              b.n_threads == 2 && !strcmp(b.k_spec, "fp32"),
          "bench defaults");
    CHECK(BENCH("bench", "--positions", "2,3,4,5,6,7,8,9,10") == OPTS_RUN && b.n_positions == 9 && b.positions[8] == 10 &&
              b.positions_given,
          "nine positions kept: %d", b.n_positions);
    CHECK(BENCH("bench", "--positions", "0") == OPTS_ERROR && strstr(err, "--positions: 0 is out of range (2.."),
          "positions 0: %s", err);
    CHECK(BENCH("bench", "--positions", "") == OPTS_ERROR && strstr(err, "empty list"), "empty list: %s", err);
    CHECK(BENCH("bench", "--positions", "1,x") == OPTS_ERROR && strstr(err, "--positions"), "1,x: %s", err);
    CHECK(BENCH("bench", "--threads", "2,x") == OPTS_ERROR && strstr(err, "'x' in '2,x' is not an integer"), "2,x: %s", err);
    // While parsing, a spec's form and family; its values are checked against the loaded model's shape.
    CHECK(BENCH("bench", "--cache", "bogus") == OPTS_ERROR && strstr(err, "unknown cache codec"), "bad spec: %s", err);
    CHECK(BENCH("bench", "--cache", "int:bits=4,") == OPTS_ERROR, "malformed spec accepted");
    CHECK(BENCH("bench", "--k", "int:bits=4", "--cache", "q4_0") == OPTS_RUN && !strcmp(b.k_spec, "int:bits=4") &&
              !strcmp(b.v_spec, "q4_0"),
          "--k beside --cache");
    CHECK(BENCH("bench", "--frobnicate") == OPTS_UNKNOWN && strstr(err, "unknown option '--frobnicate'"), "unknown: %s", err);
    CHECK(BENCH("bench", "--help", "--bogus") == OPTS_HELP, "help first");
    CHECK(BENCH("bench", "--repeat") == OPTS_ERROR && !strcmp(err, "--repeat needs a value"), "missing value: %s", err);
}

static void test_capacity(void) {
    CapacityOptions c;
    char err[512];
    CHECK(CAPACITY("capacity") == OPTS_RUN && c.n_bits == 5 && c.n_schemes == 0, "capacity defaults");
    CHECK(CAPACITY("capacity", "--scheme", "q4_0") == OPTS_RUN && c.n_bits == 0 && c.n_schemes == 1, "scheme alone");
    CHECK(CAPACITY("capacity", "--bits", "3", "--scheme", "q4_0") == OPTS_RUN && c.n_bits == 1 && c.bits[0] == 3 &&
              c.n_schemes == 1,
          "--bits beside --scheme: both");
    CHECK(CAPACITY("capacity", "--bits", "") == OPTS_ERROR, "--bits ''");
    // Flags override the preset wherever they stand.
    CHECK(CAPACITY("capacity", "--context", "100", "--preset", "micro") == OPTS_RUN && c.model.context == 100 &&
              c.model.layers == 4,
          "flag before preset: %d", c.model.context);
    CHECK(CAPACITY("capacity", "--scheme", "int:bits=1", "--kv-heads", "100000", "--head-dim", "100000", "--context",
                   "1") == OPTS_ERROR &&
              strstr(err, "beyond the"),
          "unmeasurable: %s", err);
}

static void test_others(void) {
    char err[512];
    EvalOptions e;
    CHECK(eval_parse(3, ARGV("eval", "--threads", "99999999999999999999"), &e, err, sizeof err) == OPTS_ERROR &&
              strstr(err, "is out of range (1..256)"),
          "huge threads: %s", err);
    CHECK(eval_parse(3, ARGV("eval", "--text", "x:0"), &e, err, sizeof err) == OPTS_ERROR && strstr(err, "--text: "),
          "text count 0: %s", err);
    GenerateOptions g;
    CHECK(generate_parse(3, ARGV("generate", "--prompt", "\xff"), &g, err, sizeof err) == OPTS_ERROR &&
              strstr(err, "not valid UTF-8"),
          "bad prompt: %s", err);
    TrainOptions t;
    CHECK(train_parse(3, ARGV("train", "--dim", "7"), &t, err, sizeof err) == OPTS_ERROR && strstr(err, "dim 7"),
          "train config checked in parse: %s", err);
    CHECK(train_parse(5, ARGV("train", "--heads", "2", "--dim", "16"), &t, err, sizeof err) == OPTS_RUN &&
              t.config.n_kv_heads == 2 && t.config.head_dim == 8,
          "train shape follows --heads");
    PlateOptions p;
    CHECK(plate_parse(3, ARGV("plate", "--csv", "--json"), &p, err, sizeof err) == OPTS_ERROR, "csv and json");
    ExportOptions x;
    CHECK(export_parse(1, ARGV("export"), &x, err, sizeof err) == OPTS_ERROR && strstr(err, "--llama2c"), "export: %s", err);
    InspectOptions i;
    CHECK(inspect_parse(2, ARGV("inspect", "--csv"), &i, err, sizeof err) == OPTS_RUN && i.csv, "inspect csv");
}

int main(void) {
    test_msg_text();
    test_bench();
    test_capacity();
    test_others();
    if (failures) fprintf(stderr, "%d failures\n", failures);
    return failures != 0;
}
