// micro plate --html: DIR/plate.html, the run as one page a class can open from disk (no server, no
// network): the page's HTML, CSS and JavaScript (src/cli/page/, built into micro), the run's JSON,
// the continuations and attention weights computed here, and the run's figures, all inline.
#ifndef MICRO_PLATE_PAGE_H
#define MICRO_PLATE_PAGE_H

#include <stddef.h>

#include "model.h"
#include "text.h"

// The page's template, style and script (generated from src/cli/page/ by src/cli/figures/embed.py).
typedef struct {
    const char *name, *text;
} PageAsset;
extern const PageAsset page_assets[];
extern const int page_assets_count;

// One width of the plate's scheme: its label in the run's JSON ("int 4") and its cache spec.
typedef struct {
    const char *label, *spec;
} PageWidth;

typedef struct {
    const Model *model;
    const char *model_name, *kernels;
    const Text *texts;       // [2]: the English and the Chinese plate, BOS first
    const PageWidth *widths; // the plate's scheme from the widest to the narrowest
    int n_widths;
    const char *run_json;    // what the run wrote to DIR/plate.json
    size_t run_json_len;
    const char *dir;         // DIR: plate.html is written there, beside the run's figures
} PlatePage;

// Writes DIR/plate.html (a temporary renamed into place). 0, or -1 with one line in err. *bytes
// gets the page's size.
int plate_page_write(const PlatePage *p, size_t *bytes, char *err, size_t errlen);

#endif
