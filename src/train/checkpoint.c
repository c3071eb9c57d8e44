#include "checkpoint.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msgtext.h"
#include "safe_file.h"

typedef struct {
    FILE *f;
    uint64_t hash;
} Writer;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
#define FNV_BASIS 0xcbf29ce484222325ULL

static void put(Writer *w, const void *p, size_t n) {
    if (n == 0) return;
    w->hash = fnv(w->hash, p, n);
    fwrite(p, 1, n, w->f); // a short write sets the stream's error flag, which safe_commit reports
}

int checkpoint_save(const char *path, const Checkpoint *c, char *err, size_t errlen) {
    // Written beside the old checkpoint and renamed over it: a kill in mid-write leaves the
    // previous checkpoint whole.
    SafeFile out;
    if (safe_open(&out, path, err, errlen)) return -1;
    Writer w = {out.f, FNV_BASIS};
    uint32_t version = CKPT_VERSION;
    size_t n = (size_t)c->pr.n_params;
    put(&w, CKPT_MAGIC, 8);
    put(&w, &version, sizeof version);
    put(&w, &c->id, sizeof c->id);
    put(&w, &c->pr, sizeof c->pr);
    put(&w, c->params, n * sizeof(float));
    put(&w, c->m, n * sizeof(float));
    put(&w, c->v, n * sizeof(float));
    put(&w, c->train_loss, (size_t)c->id.steps * sizeof(float));
    put(&w, c->val, (size_t)c->pr.n_val * sizeof(ValRecord));
    uint64_t h = w.hash;
    put(&w, &h, sizeof h);
    return safe_commit(&out, err, errlen); // reports any failed put with its reason
}

void checkpoint_free_arrays(Checkpoint *c) {
    free(c->params);
    free(c->m);
    free(c->v);
    free(c->train_loss);
    free(c->val);
    c->params = c->m = c->v = c->train_loss = NULL;
    c->val = NULL;
}

int checkpoint_load(const char *path, Checkpoint *c, char *err, size_t errlen) {
    char shown[MSG_TEXT]; // the path as messages echo it: shortened, escaped
    msg_text(path, shown, sizeof shown);
    memset(c, 0, sizeof *c);
    long long size = 0;
    FILE *f = safe_open_read(path, &size, err, errlen); // a regular file: a FIFO or a folder is refused
    if (!f) return -1;
    unsigned char *buf = NULL;
    long len = size > 0 && size <= LONG_MAX ? (long)size : -1;
    if (len > 0) buf = malloc((size_t)len);
    int ok = buf && fread(buf, 1, (size_t)len, f) == (size_t)len;
    fclose(f);
    uint32_t version = 0;
    if (ok && len >= 12) memcpy(&version, buf + 8, 4);
    // Version 1's RunIdent ends before latent_dim: a multi-head or grouped-query run.
    const size_t ident = version == 1 ? offsetof(RunIdent, latent_dim) : sizeof(RunIdent);
    size_t head = 8 + 4 + ident + sizeof(RunProgress);
    if (!ok || (size_t)len < head + 8) {
        free(buf);
        snprintf(err, errlen, "checkpoint %s is unreadable or too short", shown);
        return -1;
    }
    if (memcmp(buf, CKPT_MAGIC, 8) != 0 || version < 1 || version > CKPT_VERSION) {
        free(buf);
        snprintf(err, errlen, "%s is not a version-1 or -%u micro checkpoint", shown, CKPT_VERSION);
        return -1;
    }
    memcpy(&c->id, buf + 12, ident);
    memcpy(&c->pr, buf + 12 + ident, sizeof c->pr);
    int64_t n = c->pr.n_params, steps = c->id.steps, nv = c->pr.n_val;
    if (n <= 0 || n > ((int64_t)1 << 32) || steps < 0 || steps > ((int64_t)1 << 30) || nv < 0 ||
        nv > ((int64_t)1 << 30) || c->pr.step < 0 || c->pr.step > steps) {
        free(buf);
        snprintf(err, errlen, "checkpoint %s has impossible sizes", shown);
        return -1;
    }
    size_t want = head + 3 * (size_t)n * sizeof(float) + (size_t)steps * sizeof(float) + (size_t)nv * sizeof(ValRecord) + 8;
    if ((size_t)len != want) {
        free(buf);
        snprintf(err, errlen, "checkpoint %s is %ld bytes, expected %zu (truncated?)", shown, len, want);
        return -1;
    }
    uint64_t stored;
    memcpy(&stored, buf + want - 8, 8);
    if (fnv(FNV_BASIS, buf, want - 8) != stored) {
        free(buf);
        snprintf(err, errlen, "checkpoint %s fails its checksum", shown);
        return -1;
    }
    c->params = malloc((size_t)n * sizeof(float));
    c->m = malloc((size_t)n * sizeof(float));
    c->v = malloc((size_t)n * sizeof(float));
    c->train_loss = malloc(((size_t)steps + 1) * sizeof(float));
    c->val = malloc(((size_t)nv + 1) * sizeof(ValRecord));
    if (!c->params || !c->m || !c->v || !c->train_loss || !c->val) {
        checkpoint_free_arrays(c);
        free(buf);
        snprintf(err, errlen, "out of memory reading checkpoint %s", shown);
        return -1;
    }
    const unsigned char *p = buf + head;
    memcpy(c->params, p, (size_t)n * sizeof(float));
    p += (size_t)n * sizeof(float);
    memcpy(c->m, p, (size_t)n * sizeof(float));
    p += (size_t)n * sizeof(float);
    memcpy(c->v, p, (size_t)n * sizeof(float));
    p += (size_t)n * sizeof(float);
    memcpy(c->train_loss, p, (size_t)steps * sizeof(float));
    p += (size_t)steps * sizeof(float);
    memcpy(c->val, p, (size_t)nv * sizeof(ValRecord));
    free(buf);
    return 0;
}
