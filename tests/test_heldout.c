// The plates are held out: no 64-byte window of either plate occurs anywhere in the training corpus.
//
// The corpus is not in the repository (it is Debian's text, rebuilt by scripts/corpus), so the
// check has two forms:
// - with data/corpus present: every 64-byte window of the corpus is hashed and compared with the
//   plates' windows (bytes compared on a hash match), and the committed fingerprint file
//   data/heldout.fingerprints is checked to be exactly what this corpus gives;
// - without it (a fresh clone, CI): the same check against that fingerprint file. It holds the
//   64-bit hash of every corpus window whose hash falls in one of the 2^24 buckets that the plates'
//   windows occupy — a corpus window equal to a plate window has the plate window's hash, so it is
//   in the file: the check loses nothing, yet the file keeps ~0.03% of the 11 M windows. The file
//   names the sha256 of the plates it was made for; other plates fail the test (regenerate it).
//
// `test_heldout --write` (corpus present) rewrites the fingerprint file.
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stb_ds_setup.h"
#include "sha256.h"

#define WINDOW 64
#define BASE 1099511628211ull
#define BUCKET_BITS 24
#define FINGERPRINTS "data/heldout.fingerprints"

static const char *plate_names[] = {"en", "zh"};
static const char *corpus_parts[] = {"en.train", "en.val", "zh.train", "zh.val"};

typedef struct {
    uint64_t key;   // rolling hash of a plate window
    long value;     // its offset in the plate
} WindowEntry;

typedef struct {
    uint64_t key;
    char value;
} HashSet;

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *b = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size >= 0 && fseek(f, 0, SEEK_SET) == 0) b = malloc((size_t)size + 1);
    if (b && fread(b, 1, (size_t)size, f) != (size_t)size) {
        free(b);
        b = NULL;
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

// The polynomial hash's top bits depend weakly on the last bytes; a finaliser spreads every bit
// before the bucket is taken (splitmix64's).
static uint32_t bucket_of(uint64_t h) {
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    return (uint32_t)(h >> (64 - BUCKET_BITS));
}

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

typedef struct {
    uint8_t *bytes[2];
    size_t len[2];
    WindowEntry *windows[2];
    uint8_t *buckets; // [2^BUCKET_BITS]: 1 where some plate window's hash falls
    char sha[65];     // of en.txt then zh.txt
} Plates;

static int load_plates(const char *root, Plates *p) {
    char path[4096];
    Sha256 s;
    sha256_init(&s);
    p->buckets = calloc((size_t)1 << BUCKET_BITS, 1);
    if (!p->buckets) return 0;
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/data/plates/%s.txt", root, plate_names[i]);
        p->windows[i] = NULL;
        p->bytes[i] = read_file(path, &p->len[i]);
        if (!p->bytes[i] || p->len[i] < WINDOW) {
            printf("FAIL cannot read plate %s\n", path);
            return 0;
        }
        sha256_update(&s, p->bytes[i], p->len[i]);
        for (size_t j = 0; j + WINDOW <= p->len[i]; j++) {
            uint64_t h = hash_window(p->bytes[i] + j);
            hmput(p->windows[i], h, (long)j);
            p->buckets[bucket_of(h)] = 1;
        }
    }
    sha256_final_hex(&s, p->sha);
    return 1;
}

static void free_plates(Plates *p) {
    for (int i = 0; i < 2; i++) {
        hmfree(p->windows[i]);
        free(p->bytes[i]);
    }
    free(p->buckets);
}

// Scans the corpus: counts windows equal to a plate window (bytes compared) and collects the
// fingerprints (hashes in the plates' buckets). Returns the number of corpus files found.
static int scan_corpus(const char *root, Plates *p, int *matches, uint64_t **prints, size_t *scanned) {
    char path[4096];
    uint64_t top = 1; // the highest power of the base, to roll a byte out of the hash
    for (int i = 1; i < WINDOW; i++) top *= BASE;
    int found = 0;
    for (int c = 0; c < 4; c++) {
        size_t n;
        snprintf(path, sizeof path, "%s/data/corpus/%s.txt", root, corpus_parts[c]);
        uint8_t *text = read_file(path, &n);
        if (!text) continue;
        found++;
        *scanned += n;
        if (n >= WINDOW) {
            uint64_t h = hash_window(text);
            for (size_t i = 0;; i++) {
                if (p->buckets[bucket_of(h)]) {
                    arrput(*prints, h);
                    for (int q = 0; q < 2; q++) {
                        ptrdiff_t k = hmgeti(p->windows[q], h);
                        if (k >= 0 && memcmp(p->bytes[q] + p->windows[q][k].value, text + i, WINDOW) == 0 &&
                            (*matches)++ < 5)
                            printf("FAIL %s.txt bytes %ld..%ld occur in %s at offset %zu\n", plate_names[q],
                                   p->windows[q][k].value, p->windows[q][k].value + WINDOW, corpus_parts[c], i);
                    }
                }
                if (i + WINDOW >= n) break;
                h = (h - text[i] * top) * BASE + text[i + WINDOW];
            }
        }
        free(text);
    }
    // Sorted and without repeats: the file is then a function of the corpus alone.
    size_t n = (size_t)arrlen(*prints), kept = 0;
    if (n) qsort(*prints, n, sizeof **prints, compare_u64);
    for (size_t i = 0; i < n; i++)
        if (i == 0 || (*prints)[i] != (*prints)[kept - 1]) (*prints)[kept++] = (*prints)[i];
    if (*prints) arrsetlen(*prints, kept);
    return found;
}

static int write_fingerprints(const char *path, const char *plates_sha, const uint64_t *prints, size_t n) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return 0;
    fprintf(f, "micro held-out fingerprints 1\nwindow %d\nbucket-bits %d\nplates-sha256 %s\ncount %zu\n", WINDOW,
            BUCKET_BITS, plates_sha, n);
    for (size_t i = 0; i < n; i++) fprintf(f, "%016" PRIx64 "\n", prints[i]);
    int ok = fflush(f) == 0 && !ferror(f);
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return 0;
    }
    return 1;
}

// Reads the fingerprint file; NULL with a message when it is missing or malformed.
static uint64_t *read_fingerprints(const char *path, char plates_sha[65], size_t *n) {
    FILE *f = fopen(path, "r");
    if (!f) {
        printf("FAIL cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    int window = 0, bits = 0, version = 0;
    uint64_t *prints = NULL;
    if (fscanf(f, "micro held-out fingerprints %d window %d bucket-bits %d plates-sha256 %64s count %zu", &version,
               &window, &bits, plates_sha, n) != 5 ||
        version != 1 || window != WINDOW || bits != BUCKET_BITS || *n > 100000000) {
        printf("FAIL %s: bad header\n", path);
        fclose(f);
        return NULL;
    }
    prints = malloc((*n ? *n : 1) * sizeof *prints);
    for (size_t i = 0; prints && i < *n; i++) {
        if (fscanf(f, "%" SCNx64, &prints[i]) != 1) {
            printf("FAIL %s: %zu fingerprints, expected %zu\n", path, i, *n);
            free(prints);
            prints = NULL;
        }
    }
    fclose(f);
    return prints;
}

int main(int argc, char **argv) {
    const char *root = getenv("MICRO_SOURCE_ROOT");
    if (!root) root = ".";
    int write = argc > 1 && !strcmp(argv[1], "--write");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, FINGERPRINTS);

    Plates plates;
    if (!load_plates(root, &plates)) return 1;
    int matches = 0, status = 0;
    size_t scanned = 0;
    uint64_t *prints = NULL;
    int found = scan_corpus(root, &plates, &matches, &prints, &scanned);
    if (found > 0 && found < 4) {
        printf("FAIL: only %d of the 4 corpus files exist\n", found);
        status = 1;
    } else if (found == 4) {
        printf("%zu corpus bytes scanned, %d plate windows of %d bytes found in them\n", scanned, matches, WINDOW);
        if (matches) status = 1;
    }
    if (write) {
        if (found != 4 || !write_fingerprints(path, plates.sha, prints, (size_t)arrlen(prints))) {
            printf("FAIL cannot write %s (the corpus must be present: scripts/corpus)\n", path);
            status = 1;
        } else {
            printf("wrote %td fingerprints to %s\n", arrlen(prints), path);
        }
    } else {
        char sha[65] = "";
        size_t n = 0;
        uint64_t *committed = read_fingerprints(path, sha, &n);
        if (!committed) {
            status = 1;
        } else if (strcmp(sha, plates.sha) != 0) {
            printf("FAIL %s was made for other plates (sha256 %s, the plates are %s): run test_heldout --write\n",
                   FINGERPRINTS, sha, plates.sha);
            status = 1;
        } else {
            if (found == 4 && (n != (size_t)arrlen(prints) || memcmp(committed, prints, n * sizeof *prints) != 0)) {
                printf("FAIL %s is not what this corpus gives (%zu fingerprints, the corpus gives %td)\n",
                       FINGERPRINTS, n, arrlen(prints));
                status = 1;
            }
            // The check a fresh clone can run: no plate window's hash among the corpus's.
            HashSet *set = NULL;
            for (size_t i = 0; i < n; i++) hmput(set, committed[i], 1);
            int hits = 0;
            for (int q = 0; q < 2; q++)
                for (ptrdiff_t k = 0; k < hmlen(plates.windows[q]); k++)
                    if (hmgeti(set, plates.windows[q][k].key) >= 0 && hits++ < 5)
                        printf("FAIL %s.txt bytes %ld..%ld: a corpus window has their hash\n", plate_names[q],
                               plates.windows[q][k].value, plates.windows[q][k].value + WINDOW);
            printf("%zu corpus fingerprints, %d plate windows among them\n", n, hits);
            if (hits) status = 1;
            hmfree(set);
            free(committed);
        }
    }
    arrfree(prints);
    free_plates(&plates);
    return status;
}
