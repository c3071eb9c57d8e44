// The one list of cache specs (spec_catalog.h): every family in the registry has examples in it,
// each example's specs are well formed for their role and name their own family, and a stream of
// each (but the calibrated ones, which need a calibration) can be made and fed.
#include <stdlib.h>

#include "check.h"
#include "kvcache.h"
#include "spec_catalog.h"

int main(void) {
    int n_families, n;
    const CodecFamily *const *families = codec_families(&n_families);
    const CatalogEntry *cat = spec_catalog(&n);
    char err[512];
    for (int f = 0; f < n_families; f++) {
        int found = 0;
        for (int i = 0; i < n; i++) found += !strcmp(cat[i].family, families[f]->name);
        CHECK(found > 0, "family %s has no examples in the catalog (its CodecFamily .examples)", families[f]->name);
    }
    int transforms = 0;
    for (int i = 0; i < n; i++) {
        transforms += !strcmp(cat[i].family, "transforms");
        const char *specs[2] = {cat[i].k, cat[i].v};
        // A calibrated example's form (its calibration is checked where one is loaded).
        for (int role = 0; role < 2; role++)
            CHECK((cat[i].calibrated ? kvstream_check_spec_syntax(specs[role], err, sizeof err)
                                     : kvstream_check_spec(specs[role], (KVRole)role, err, sizeof err)) == 0,
                  "%s (%s): %s", specs[role], role ? "values" : "keys", err);
        // An example of a family begins with its name (a "K|V" pair at least on one side).
        if (strcmp(cat[i].family, "transforms")) {
            const size_t len = strlen(cat[i].family);
            const int named = (!strncmp(cat[i].k, cat[i].family, len) && strchr(":", cat[i].k[len])) ||
                              (!strncmp(cat[i].v, cat[i].family, len) && strchr(":", cat[i].v[len]));
            CHECK(named, "%s|%s is listed under %s", cat[i].k, cat[i].v, cat[i].family);
        }
        if (cat[i].calibrated) continue;
        for (int role = 0; role < 2; role++) {
            // One width limit for every codec, fp32 and the transforms included: a stream one pair
            // wider than MICRO_MAX_WIDTH is refused before its state (and any scratch) is sized.
            KVStream wide;
            CHECK(kvstream_init(&wide, SPEC(specs[role]), (KVRole)role, 1, MICRO_MAX_WIDTH + 2, 4, err, sizeof err) != 0,
                  "%s: a stream of %d numbers a head was accepted", specs[role], MICRO_MAX_WIDTH + 2);
        }
        for (int role = 0; role < 2; role++) {
            KVStream s;
            if (kvstream_init(&s, SPEC(specs[role]), (KVRole)role, 2, 32, 48, err, sizeof err)) {
                CHECK(0, "%s: %s", specs[role], err);
                continue;
            }
            float x[64];
            for (int t = 0; t < 48; t++) {
                for (int j = 0; j < 64; j++) x[j] = (float)((t * 7 + j * 13) % 17) / 8.0f - 1.0f;
                kvstream_append(&s, x);
                kvstream_end_step(&s);
            }
            CHECK(kvstream_bits_per_element(&s) > 0, "%s: no bits counted", specs[role]);
            kvstream_free(&s);
        }
    }
    CHECK(transforms > 0, "no transform examples");
    CHECK(n < 256, "the catalog is full (%d): raise CATALOG_MAX", n);
    printf("spec catalog: %d entries over %d families and the transforms\n", n, n_families);
    return failures != 0;
}
