// The capacity arithmetic against the plate's figures and cases worked out by hand.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "spec_text.h"
#include "capacity.h"
#include "plate_capacity.h"

static int failures = 0;

static void expect_conversations(const char *label, const CapacityModel *m, double bits, long want) {
    CapacityRow r = capacity_row(m, bits);
    int ok = r.conversations == want;
    printf("%s %-44s %ld (want %ld)\n", ok ? "ok  " : "FAIL", label, r.conversations, want);
    failures += !ok;
}

int main(void) {
    const CapacityModel *l8 = capacity_preset("llama3-8b");
    // The plate: (80 * 0.9 - 16.1) GB = 55.9e9 bytes; 16 bits: 2 * 32 * 8 * 128 * 2 = 131072 bytes per token,
    // * 8192 = 1.0737e9 per conversation -> 52.06 -> 52; 8 bits -> 104.1; 4 bits -> 208.2.
    expect_conversations("llama3-8b at 16 bits (the plate: 52)", l8, 16, 52);
    expect_conversations("llama3-8b at 8 bits (the plate: 104)", l8, 8, 104);
    expect_conversations("llama3-8b at 4 bits (the plate: 208)", l8, 4, 208);
    CapacityRow r = capacity_row(l8, 16);
    if (r.bytes_per_token != 131072) {
        printf("FAIL bytes per token %.0f, want 131072\n", r.bytes_per_token);
        failures++;
    }
    // Scales counted: int:bits=4 with one fp16 scale per 128 numbers = 4 + 16/128 = 4.125 bits;
    // 55.9e9 / (2*32*8*128*4.125/8 * 8192) = 201.9 -> 201.
    double bits;
    char err[256];
    if (capacity_scheme_bits(l8, SPEC("int:bits=4"), &bits, err, sizeof err) || fabs(bits - 4.125) > 1e-12) {
        printf("FAIL int:bits=4 at head_dim 128 should be 4.125 bits, got %g %s\n", bits, err);
        failures++;
    }
    expect_conversations("llama3-8b, int:bits=4 with fp16 scales", l8, bits, 201);
    // The plate measures its schemes on one head's conversation (plate_capacity.h): each must code
    // every head on its own, so that 8 heads store the same bits per number, to the last bit of the
    // double (a context that leaves KIVI a part-filled residual). Outliers, chosen across the heads,
    // would not: int:bits=4,rot=hadamard,outliers=2 stores 4.75 bits with 8 heads, 4.5 with one.
    for (int i = 0; i < PLATE_CAPACITY_SCHEMES; i++) {
        const char *spec = plate_capacity_schemes[i];
        CapacityModel eight = *l8, one = *l8;
        eight.context = one.context = 530;
        one.kv_heads = 1;
        double b8 = 0, b1 = -1;
        if (capacity_scheme_bits(&eight, SPEC(spec), &b8, err, sizeof err) ||
            capacity_scheme_bits(&one, SPEC(spec), &b1, err, sizeof err) || b8 != b1) {
            printf("FAIL %s: %.17g bits per number with 8 heads, %.17g with one %s\n", spec, b8, b1, err);
            failures++;
        } else {
            printf("ok   %-44s %.6f bits with 8 heads and with one\n", spec, b1);
        }
    }
    // GQA by hand: a model with 40 layers, 8 KV heads of 128, 26 GB of weights on a 48 GB GPU at 95%,
    // 4096-token conversations at 8 bits: (45.6 - 26) e9 / (2*40*8*128*1 * 4096) = 19.6e9 / 335544320 = 58.4 -> 58.
    CapacityModel gqa = {"gqa", 40, 8, 128, 26, 48, 0.95, 4096};
    expect_conversations("40 layers x 8 KV heads, 48 GB GPU, 8 bits", &gqa, 8, 58);
    // Multi-head (no GQA): 32 KV heads quadruple the cache: 55.9e9 / (4 * 1.0737e9) = 13.0 -> 13.
    CapacityModel mha = *l8;
    mha.kv_heads = 32;
    expect_conversations("llama3-8b shape with 32 KV heads, 16 bits", &mha, 16, 13);
    // Bad input is refused.
    CapacityModel bad = *l8;
    bad.util = 0;
    failures += capacity_check(&bad, err, sizeof err) == 0;
    bad = *l8, bad.util = 1.01;
    failures += capacity_check(&bad, err, sizeof err) == 0;
    bad = *l8, bad.weights_gb = 72;
    failures += capacity_check(&bad, err, sizeof err) == 0;
    bad = *l8, bad.context = 0;
    failures += capacity_check(&bad, err, sizeof err) == 0;
    failures += capacity_check(l8, err, sizeof err) != 0;
    failures += capacity_preset("nope") != NULL;
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
