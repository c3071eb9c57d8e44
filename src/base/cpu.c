#include "cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msgtext.h"

static const char *const names[] = {"portable", "avx2", "avx512"};

#if defined(__x86_64__)
#include <cpuid.h>

// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know the name. The
// OS's support for the AVX state it needs comes with AVX2's, which the builtin checks.
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}
#endif

static Isa probe(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("bmi") &&
        __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("fma") && has_f16c())
        return ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c() &&
        __builtin_cpu_supports("bmi2"))
        return ISA_AVX2;
#endif
    return ISA_PORTABLE;
}

// What the environment asks for: a set, or -1 for none (or a name micro does not know: -2).
static int asked(void) {
    const char *isa = getenv("MICRO_ISA"), *portable = getenv("MICRO_PORTABLE");
    if (isa && *isa) {
        for (int i = 0; i < 3; i++)
            if (!strcmp(isa, names[i])) return i;
        return -2;
    }
    return portable && *portable && strcmp(portable, "0") != 0 ? ISA_PORTABLE : -1;
}

static Isa supported, chosen;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void choose(void) {
    supported = probe();
    const int want = asked();
    chosen = want >= 0 && want < (int)supported ? (Isa)want : supported;
}

Isa cpu_isa_supported(void) {
    pthread_once(&once, choose);
    return supported;
}

Isa cpu_isa(void) {
    pthread_once(&once, choose);
    return chosen;
}

const char *cpu_isa_name(Isa isa) { return names[isa]; }

int cpu_isa_check_env(char *err, size_t errlen) {
    const int want = asked();
    if (want == -2) {
        char shown[MSG_TEXT]; // the environment is user text: shortened and escaped as every message's
        snprintf(err, errlen, "MICRO_ISA: '%s' is not portable, avx2 or avx512", msg_text(getenv("MICRO_ISA"), shown, sizeof shown));
        return -1;
    }
    if (want > (int)cpu_isa_supported()) {
        snprintf(err, errlen, "MICRO_ISA=%s: this CPU runs at most %s", names[want], names[cpu_isa_supported()]);
        return -1;
    }
    return 0;
}
