// The plates are held out: no 64-byte window of either plate occurs anywhere in the training corpus.
// Skipped (exit 77, meson's "skip") when the corpus has not been built by scripts/corpus.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stb_ds_setup.h"

#define WINDOW 64
#define BASE 1099511628211ull

typedef struct {
    uint64_t key;   // rolling hash of a window
    long value;     // its offset in the plate
} WindowEntry;

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)size + 1);
    if (!b || fread(b, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        free(b);
        return NULL;
    }
    fclose(f);
    *n = (size_t)size;
    return b;
}

static uint64_t hash_window(const uint8_t *s) {
    uint64_t h = 0;
    for (int i = 0; i < WINDOW; i++) h = h * BASE + s[i];
    return h;
}

int main(void) {
    const char *root = getenv("MICRO_SOURCE_ROOT");
    if (!root) root = ".";
    const char *plates[] = {"en", "zh"}, *parts[] = {"en.train", "en.val", "zh.train", "zh.val"};
    char path[4096];
    int corpus_files = 0;
    for (int c = 0; c < 4; c++) {
        snprintf(path, sizeof path, "%s/data/corpus/%s.txt", root, parts[c]);
        FILE *f = fopen(path, "rb");
        if (f) corpus_files++, fclose(f);
    }
    if (corpus_files == 0) {
        printf("skip: data/corpus is absent (scripts/corpus builds it)\n");
        return 77;
    }
    uint8_t *plate_bytes[2];
    size_t plate_len[2];
    WindowEntry *windows[2] = {NULL, NULL};
    for (int p = 0; p < 2; p++) {
        snprintf(path, sizeof path, "%s/data/plates/%s.txt", root, plates[p]);
        plate_bytes[p] = read_file(path, &plate_len[p]);
        if (!plate_bytes[p] || plate_len[p] < WINDOW) {
            printf("FAIL cannot read plate %s\n", path);
            return 1;
        }
        for (size_t i = 0; i + WINDOW <= plate_len[p]; i++) hmput(windows[p], hash_window(plate_bytes[p] + i), (long)i);
    }
    // The highest power of the base, to roll a byte out of the hash.
    uint64_t top = 1;
    for (int i = 1; i < WINDOW; i++) top *= BASE;

    int found_corpus = 0, matches = 0;
    size_t scanned = 0;
    for (int c = 0; c < 4; c++) {
        size_t n;
        snprintf(path, sizeof path, "%s/data/corpus/%s.txt", root, parts[c]);
        uint8_t *text = read_file(path, &n);
        if (!text) continue;
        found_corpus++;
        scanned += n;
        if (n >= WINDOW) {
            uint64_t h = hash_window(text);
            for (size_t i = 0;; i++) {
                for (int p = 0; p < 2; p++) {
                    ptrdiff_t k = hmgeti(windows[p], h);
                    if (k >= 0 && memcmp(plate_bytes[p] + windows[p][k].value, text + i, WINDOW) == 0) {
                        if (matches++ < 5)
                            printf("FAIL %s.txt bytes %ld..%ld occur in %s at offset %zu\n", plates[p],
                                   windows[p][k].value, windows[p][k].value + WINDOW, parts[c], i);
                    }
                }
                if (i + WINDOW >= n) break;
                h = (h - text[i] * top) * BASE + text[i + WINDOW];
            }
        }
        free(text);
    }
    for (int p = 0; p < 2; p++) {
        hmfree(windows[p]);
        free(plate_bytes[p]);
    }
    if (found_corpus < 4) {
        printf("FAIL: only %d of the 4 corpus files exist\n", found_corpus);
        return 1;
    }
    printf("%zu corpus bytes scanned, %d plate windows of %d bytes found in them\n", scanned, matches, WINDOW);
    return matches ? 1 : 0;
}
