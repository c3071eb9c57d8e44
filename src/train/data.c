#include "data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model.h"
#include "msgtext.h"
#include "safe_file.h"
#include "sha256.h"

static int read_file(const char *path, unsigned char **out, size_t *len, char *err, size_t errlen) {
    FILE *f = safe_open_read(path, NULL, err, errlen); // a regular file: never block on a FIFO
    if (!f) return -1;
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        unsigned char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        char shown[MSG_TEXT];
        snprintf(err, errlen, "cannot read %s", msg_text(path, shown, sizeof shown));
        return -1;
    }
    *out = buf;
    *len = n;
    return 0;
}

int corpus_load(Corpus *c, const char *dir, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    static const char *names[4] = {"en.train.txt", "en.val.txt", "zh.train.txt", "zh.val.txt"};
    unsigned char *bufs[4] = {0};
    Sha256 h;
    sha256_init(&h);
    for (int i = 0; i < 4; i++) {
        char path[4096], shown[MSG_TEXT];
        if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path) {
            snprintf(err, errlen, "--corpus %s: path too long", msg_text(dir, shown, sizeof shown));
            for (int j = 0; j < i; j++) free(bufs[j]);
            return -1;
        }
        if (read_file(path, &bufs[i], &c->file_len[i], err, errlen)) {
            for (int j = 0; j < i; j++) free(bufs[j]);
            return -1;
        }
        if (c->file_len[i] == 0 || bufs[i][0] != MICRO_BOS) {
            snprintf(err, errlen, "%s does not start with BOS (byte 0x01)", msg_text(path, shown, sizeof shown));
            for (int j = 0; j <= i; j++) free(bufs[j]);
            return -1;
        }
        sha256_update(&h, bufs[i], c->file_len[i]);
    }
    sha256_final_hex(&h, c->sha256);
    c->en_train_len = c->file_len[0];
    c->train_len = c->file_len[0] + c->file_len[2];
    c->train = malloc(c->train_len);
    if (!c->train) {
        for (int j = 0; j < 4; j++) free(bufs[j]);
        snprintf(err, errlen, "out of memory for the corpus");
        return -1;
    }
    memcpy(c->train, bufs[0], c->file_len[0]);
    memcpy(c->train + c->file_len[0], bufs[2], c->file_len[2]);
    free(bufs[0]);
    free(bufs[2]);
    c->val[LANG_EN] = bufs[1];
    c->val_len[LANG_EN] = c->file_len[1];
    c->val[LANG_ZH] = bufs[3];
    c->val_len[LANG_ZH] = c->file_len[3];
    return 0;
}

void corpus_free(Corpus *c) {
    free(c->train);
    free(c->val[0]);
    free(c->val[1]);
    memset(c, 0, sizeof *c);
}

// The start of the document containing pos (its BOS), or pos when no BOS precedes it.
static size_t doc_start(const unsigned char *data, size_t pos) {
    const unsigned char *p = memrchr(data, MICRO_BOS, pos + 1);
    return p ? (size_t)(p - data) : pos;
}

void window_tokens(const unsigned char *data, size_t start, int T, int *inputs, int *targets) {
    for (int t = 0; t < T; t++) {
        inputs[t] = data[start + t];
        targets[t] = data[start + t + 1];
    }
}

void batch_sample(const unsigned char *data, size_t len, Rng *rng, int B, int T, int *inputs, int *targets) {
    size_t span = len - (size_t)T; // starts in [0, len - T - 1]
    for (int b = 0; b < B; b++) {
        size_t pos = (size_t)rng_below(rng, span);
        if (rng_u64(rng) >> 63) pos = doc_start(data, pos);
        window_tokens(data, pos, T, inputs + (size_t)b * T, targets + (size_t)b * T);
    }
}

int val_windows(const unsigned char *data, size_t len, int n, int T, size_t *starts) {
    if (len < (size_t)T + 1 || n < 1) return 0;
    size_t last = len - (size_t)T - 1;
    int k = 0;
    for (int i = 0; i < n; i++) {
        size_t pos = n == 1 ? 0 : (size_t)((double)last * i / (n - 1));
        pos = doc_start(data, pos);
        if (k > 0 && pos == starts[k - 1]) continue; // one long document: skip the repeat
        starts[k++] = pos;
    }
    return k;
}
