// The one list of cache specs that the tests and the fuzzers cover: every registered family's
// examples (CodecFamily.examples and .calibrated_examples, written in the family's own file), then
// the stream transforms' (transform_examples). A family added to the registry is in it at once, and
// tests/test_spec_catalog.c fails for a family without examples.
#ifndef MICRO_SPEC_CATALOG_H
#define MICRO_SPEC_CATALOG_H

typedef struct {
    const char *k, *v;  // the key and value specs (the same for an example without '|')
    const char *family; // the family whose examples it is, or "transforms"
    int calibrated;     // needs a calibration of the model (kvq_view.h)
} CatalogEntry;

// The entries, in the registry's order; *n gets how many. Built once, then read-only.
const CatalogEntry *spec_catalog(int *n);

#endif
