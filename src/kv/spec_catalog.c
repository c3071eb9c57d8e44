#include "spec_catalog.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kvcache.h"
#include "kvtransform.h"

#define CATALOG_MAX 256
#define CATALOG_TEXT 96

static CatalogEntry entries[CATALOG_MAX];
static char text[CATALOG_MAX][2][CATALOG_TEXT];
static int count;
static pthread_once_t built = PTHREAD_ONCE_INIT;

static void add(const char *example, const char *family, int calibrated) {
    if (count == CATALOG_MAX) return; // the catalog's test checks that every family made it in
    const char *bar = strchr(example, '|');
    snprintf(text[count][0], CATALOG_TEXT, "%.*s", bar ? (int)(bar - example) : (int)strlen(example), example);
    snprintf(text[count][1], CATALOG_TEXT, "%s", bar ? bar + 1 : example);
    entries[count] = (CatalogEntry){text[count][0], text[count][1], family, calibrated};
    count++;
}

static void build(void) {
    int n;
    const CodecFamily *const *families = codec_families(&n);
    for (int i = 0; i < n; i++) {
        for (const char *const *e = families[i]->examples; e && *e; e++) add(*e, families[i]->name, 0);
        for (const char *const *e = families[i]->calibrated_examples; e && *e; e++) add(*e, families[i]->name, 1);
    }
    for (const char *const *e = transform_examples; *e; e++) add(*e, "transforms", 0);
}

const CatalogEntry *spec_catalog(int *n) {
    pthread_once(&built, build);
    *n = count;
    return entries;
}
