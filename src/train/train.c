// The training loop: batches, forward/backward, clipping, AdamW, validation, checkpoints, record.
#include "train.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model_file.h"
#include "msgtext.h"
#include "safe_file.h"
#include "adamw.h"
#include "checkpoint.h"
#include "data.h"
#include "gpt.h"
#include "rng.h"

void train_options_default(TrainOptions *o) {
    memset(o, 0, sizeof *o);
    o->corpus = "data/corpus";
    o->out = "models/micro.bin";
    o->config = model_config_micro();
    o->steps = 4000;
    o->batch = 4;
    o->seq = 2048;
    o->warmup = 100;
    o->threads = 2;
    o->checkpoint_every = 200;
    o->eval_every = 250;
    o->val_windows = 8;
    o->lr = 2e-3;
    o->min_lr_frac = 0.1;
    o->weight_decay = 0.1;
    o->grad_clip = 1.0;
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->adam_eps = 1e-8;
    o->seed = 1337;
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void run_ident(const TrainOptions *o, const Corpus *corpus, RunIdent *id) {
    memset(id, 0, sizeof *id);
    checkpoint_ident_model(id, &o->config);
    id->batch = o->batch;
    id->seq = o->seq;
    id->steps = o->steps;
    id->warmup = o->warmup;
    id->val_windows = o->val_windows;
    id->lr = o->lr;
    id->min_lr_frac = o->min_lr_frac;
    id->weight_decay = o->weight_decay;
    id->grad_clip = o->grad_clip;
    id->beta1 = o->beta1;
    id->beta2 = o->beta2;
    id->adam_eps = o->adam_eps;
    id->seed = o->seed;
    memcpy(id->corpus_sha256, corpus->sha256, 65);
}

typedef struct {
    int n[2];
    size_t *starts[2];
    int *inputs, *targets; // [B*T]
} ValSet;

// Mean loss (nats/token) over a language's validation windows, B windows per forward.
static double evaluate(TrainNet *net, const Corpus *corpus, ValSet *vs, int lang) {
    int B = net->B, T = net->T;
    double sum = 0.0;
    long count = 0;
    for (int w0 = 0; w0 < vs->n[lang]; w0 += B) {
        int used = vs->n[lang] - w0 < B ? vs->n[lang] - w0 : B;
        for (int b = 0; b < B; b++) { // pad a last partial batch with its first window (not counted)
            size_t s = vs->starts[lang][w0 + (b < used ? b : 0)];
            window_tokens(corpus->val[lang], s, T, vs->inputs + (size_t)b * T, vs->targets + (size_t)b * T);
        }
        train_net_forward(net, vs->inputs, vs->targets);
        for (long i = 0; i < (long)used * T; i++) sum += net->a.losses[i];
        count += (long)used * T;
    }
    return count ? sum / (double)count : NAN;
}

static void fmt_duration(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 1e7) {
        snprintf(buf, n, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else
        snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

static int write_json(const char *path, const TrainOptions *o, const Corpus *corpus, const Checkpoint *ck,
                      size_t n_params, const char *core, double final_en, double final_zh, int val_n[2],
                      double session_tps, char *err, size_t errlen) {
    SafeFile out;
    if (safe_open(&out, path, err, errlen)) return -1;
    FILE *f = out.f; // every fprintf below is checked once, by safe_commit, through the stream's error flag
    const ModelConfig *c = &o->config;
    TensorInfo info[MODEL_N_TENSORS];
    model_tensor_infos(c, info);
    fprintf(f, "{\n  \"model\": {\"dim\": %d, \"n_layers\": %d, \"n_heads\": %d, \"n_kv_heads\": %d, \"head_dim\": %d, "
               "\"hidden_dim\": %d, \"vocab_size\": %d, \"max_seq_len\": %d, \"rope_theta\": %g, \"norm_eps\": %g, ",
            c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->hidden_dim, c->vocab_size, c->max_seq_len,
            (double)c->rope_theta, (double)c->norm_eps);
    if (c->latent_dim > 0) fprintf(f, "\"latent_dim\": %d, \"rope_dim\": %d, ", c->latent_dim, c->rope_dim);
    fprintf(f, "\"params\": %zu},\n", n_params);
    fprintf(f, "  \"corpus\": {\"sha256\": \"%s\", \"files\": [\"en.train.txt\", \"en.val.txt\", \"zh.train.txt\", "
               "\"zh.val.txt\"], \"bytes\": [%zu, %zu, %zu, %zu]},\n",
            corpus->sha256, corpus->file_len[0], corpus->file_len[1], corpus->file_len[2], corpus->file_len[3]);
    int64_t done = ck->pr.step;
    fprintf(f, "  \"seed\": %llu,\n  \"steps\": %lld,\n  \"steps_planned\": %d,\n  \"batch\": %d,\n  \"seq\": %d,\n"
               "  \"tokens_per_step\": %lld,\n  \"tokens_seen\": %llu,\n",
            (unsigned long long)o->seed, (long long)done, o->steps, o->batch, o->seq, (long long)o->batch * o->seq,
            (unsigned long long)ck->pr.tokens_seen);
    fprintf(f, "  \"optimizer\": {\"name\": \"AdamW\", \"lr\": %g, \"warmup_steps\": %d, \"schedule\": \"linear warm-up, "
               "cosine decay to min_lr_frac*lr\", \"min_lr_frac\": %g, \"beta1\": %g, \"beta2\": %g, \"eps\": %g, "
               "\"weight_decay\": %g, \"grad_clip\": %g, \"weight_decay_on\": [",
            o->lr, o->warmup, o->min_lr_frac, o->beta1, o->beta2, o->adam_eps, o->weight_decay, o->grad_clip);
    int first = 1;
    for (int i = 0; i < MODEL_N_TENSORS; i++)
        if (info[i].is_matrix) {
            fprintf(f, "%s\"%s\"", first ? "" : ", ", info[i].name);
            first = 0;
        }
    fprintf(f, "]},\n  \"init\": \"normal(0, 0.02) from the seed (splitmix64 + Box-Muller); wo, w2 scaled by "
               "1/sqrt(2*n_layers); norm gains 1\",\n");
    fprintf(f, "  \"data\": \"random windows of seq+1 bytes from en.train+zh.train (half snapped to a document "
               "start); validation: %d/%d fixed windows of seq tokens from en.val/zh.val, each starting at a BOS\",\n",
            val_n[0], val_n[1]);
    fprintf(f, "  \"threads\": %d,\n  \"openblas_core\": \"%s\",\n  \"wall_seconds\": %.1f,\n"
               "  \"tokens_per_second_last_session\": %.0f,\n",
            o->threads, core, ck->pr.wall_seconds, session_tps);
    // the train-loss curve: the mean over each ~5% slice of the steps done
    fprintf(f, "  \"loss_curve\": [");
    int64_t slice = (done + 19) / 20 > 0 ? (done + 19) / 20 : 1; // about 5% of the steps
    first = 1;
    for (int64_t s0 = 0; s0 < done; s0 += slice) {
        int64_t s1 = s0 + slice < done ? s0 + slice : done;
        double sum = 0.0;
        for (int64_t s = s0; s < s1; s++) sum += ck->train_loss[s];
        fprintf(f, "%s\n    {\"steps\": [%lld, %lld], \"train_loss\": %.4f}", first ? "" : ",", (long long)s0 + 1,
                (long long)s1, sum / (double)(s1 - s0));
        first = 0;
    }
    fprintf(f, "\n  ],\n  \"val_curve\": [");
    for (int64_t i = 0; i < ck->pr.n_val; i++)
        fprintf(f, "%s\n    {\"step\": %lld, \"en\": %.4f, \"zh\": %.4f}", i ? "," : "", (long long)ck->val[i].step,
                ck->val[i].en, ck->val[i].zh);
    fprintf(f, "\n  ],\n  \"final_val_loss\": {\"en\": %.4f, \"zh\": %.4f, \"unit\": \"nats/token (byte)\"}\n}\n",
            final_en, final_zh);
    return safe_commit(&out, err, errlen);
}

// Every path the run will write or read, checked before any work: a bad one must not cost a run.
static int check_paths(const TrainOptions *o, char *err, size_t errlen) {
    const char *outputs[] = {o->out, o->json, o->checkpoint};
    for (int i = 0; i < 3; i++)
        if (outputs[i] && safe_check_output(outputs[i], err, errlen)) return -1;
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (outputs[i] && outputs[j] && !strcmp(outputs[i], outputs[j])) {
                snprintf(err, errlen, "%s is named for two outputs (--out, --json, --checkpoint)", outputs[i]);
                return -1;
            }
    return o->resume ? safe_check_input(o->resume, err, errlen) : 0;
}

int train_run(const TrainOptions *o) {
    char err[512];
    int status = 1;
    const ModelConfig *cfg = &o->config;
    if (check_paths(o, err, sizeof err)) {
        fprintf(stderr, "micro: %s\n", err);
        return 2;
    }
    if (model_config_validate_own(cfg, err, sizeof err)) {
        fprintf(stderr, "micro: %s\n", err);
        return 2;
    }
    if (o->seq > cfg->max_seq_len) {
        fprintf(stderr, "micro: --seq %d exceeds the model's context %d\n", o->seq, cfg->max_seq_len);
        return 2;
    }
    openblas_set_num_threads(1); // our pool splits the work; each sgemm runs on one thread (train_net_init too)
    const char *core = openblas_get_corename();
    int tty = isatty(2);

    Corpus corpus;
    if (corpus_load(&corpus, o->corpus, err, sizeof err)) {
        fprintf(stderr, "micro: %s\n", err);
        return 2;
    }
    if (corpus.train_len < (size_t)o->seq + 2) {
        fprintf(stderr, "micro: the training text (%zu bytes) is shorter than one window of %d\n", corpus.train_len,
                o->seq + 1);
        corpus_free(&corpus);
        return 2;
    }

    Model model;
    TrainNet net;
    AdamW opt;
    Checkpoint ck;
    ValSet vs;
    memset(&net, 0, sizeof net);
    memset(&opt, 0, sizeof opt);
    memset(&ck, 0, sizeof ck);
    memset(&vs, 0, sizeof vs);
    int have_model = 0;
    int *inputs = NULL, *targets = NULL;
    float *loss_hist = NULL;
    ValRecord *val_hist = NULL;
    if (model_alloc(&model, cfg)) {
        fprintf(stderr, "micro: out of memory for the model\n");
        corpus_free(&corpus);
        return 1;
    }
    have_model = 1;
    AdamWConfig acfg = {(float)o->beta1, (float)o->beta2, (float)o->adam_eps, (float)o->weight_decay};
    if (adamw_init(&opt, cfg, acfg) || train_net_init(&net, &model, o->batch, o->seq, o->threads, err, sizeof err)) {
        fprintf(stderr, "micro: %s\n", opt.m ? err : "out of memory for the optimiser");
        goto done;
    }
    size_t n = model.n_params, BT = (size_t)o->batch * o->seq;
    inputs = malloc(BT * sizeof(int));
    targets = malloc(BT * sizeof(int));
    vs.inputs = malloc(BT * sizeof(int));
    vs.targets = malloc(BT * sizeof(int));
    loss_hist = calloc((size_t)o->steps + 1, sizeof(float));
    for (int l = 0; l < 2; l++) vs.starts[l] = calloc((size_t)o->val_windows + 1, sizeof(size_t));
    if (!inputs || !targets || !vs.inputs || !vs.targets || !loss_hist || !vs.starts[0] || !vs.starts[1]) {
        fprintf(stderr, "micro: out of memory\n");
        goto done;
    }
    for (int l = 0; l < 2; l++) {
        vs.n[l] = val_windows(corpus.val[l], corpus.val_len[l], o->val_windows, o->seq, vs.starts[l]);
        if (vs.n[l] == 0) {
            fprintf(stderr, "micro: %s.val.txt (%zu bytes) is shorter than one window of %d\n", l ? "zh" : "en",
                    corpus.val_len[l], o->seq + 1);
            status = 2;
            goto done;
        }
    }

    // Fresh start or resume: the state is (params, moments, step, data RNG, history).
    RunIdent id;
    run_ident(o, &corpus, &id);
    Rng rng;
    int start = 0;
    uint64_t tokens_seen = 0;
    double wall_before = 0.0;
    int n_val = 0;
    Checkpoint in;
    memset(&in, 0, sizeof in);
    if (o->resume) {
        // The checkpoint's run is matched against this one before its payload is read.
        if (checkpoint_load_run(o->resume, &id, &in, err, sizeof err)) {
            fprintf(stderr, "micro: %s\n", err);
            status = 2;
            goto done;
        }
        char shown[MSG_TEXT], theirs[MSG_TEXT];
        msg_text(o->resume, shown, sizeof shown);
        if (strncmp(in.pr.blas_core, core, sizeof in.pr.blas_core - 1) != 0)
            fprintf(stderr, "micro: warning: checkpoint was written with OpenBLAS core %s, now %s: the continuation "
                            "will not be bit-identical\n",
                    msg_text(in.pr.blas_core, theirs, sizeof theirs), core);
        memcpy(model.params, in.params, n * sizeof(float));
        memcpy(opt.m, in.m, n * sizeof(float));
        memcpy(opt.v, in.v, n * sizeof(float));
        memcpy(loss_hist, in.train_loss, (size_t)o->steps * sizeof(float));
        n_val = (int)in.pr.n_val;
        start = (int)in.pr.step;
        rng.state = in.pr.rng_state;
        tokens_seen = in.pr.tokens_seen;
        wall_before = in.pr.wall_seconds;
        fprintf(stderr, "micro: resuming from %s at step %d/%d\n", shown, start, o->steps);
    } else {
        train_init_weights(&model, o->seed);
        rng_seed(&rng, o->seed);
    }
    // Room for the records so far and every one the rest of the run can add: one at each multiple of
    // eval_every from `start` to the end, and the last step's. eval_every is not part of the run (a
    // resume may change it), so the room is counted from the records the checkpoint holds.
    val_hist = calloc((size_t)n_val + (o->eval_every > 0 ? (size_t)((o->steps - start) / o->eval_every) : 0) + 2,
                      sizeof(ValRecord));
    if (!val_hist) {
        checkpoint_free_arrays(&in);
        fprintf(stderr, "micro: out of memory\n");
        goto done;
    }
    if (n_val > 0) memcpy(val_hist, in.val, (size_t)n_val * sizeof(ValRecord));
    checkpoint_free_arrays(&in);
    fprintf(stderr,
            "micro: training %zu parameters, %d layers x dim %d; batch %d x seq %d = %zu tokens/step, %d steps; "
            "lr %g (warm-up %d, cosine to %g); %d threads; OpenBLAS %s\n",
            n, cfg->n_layers, cfg->dim, o->batch, o->seq, BT, o->steps, o->lr, o->warmup, o->lr * o->min_lr_frac,
            o->threads, core);
    fprintf(stderr, "micro: corpus %s: train %zu bytes (en %zu, zh %zu), val en %zu zh %zu (%d + %d windows)\n",
            o->corpus, corpus.train_len, corpus.en_train_len, corpus.train_len - corpus.en_train_len,
            corpus.val_len[0], corpus.val_len[1], vs.n[0], vs.n[1]);

    ck.id = id;
    ck.params = model.params;
    ck.m = opt.m;
    ck.v = opt.v;
    ck.train_loss = loss_hist;
    ck.val = val_hist;
    snprintf(ck.pr.blas_core, sizeof ck.pr.blas_core, "%s", core);
    ck.pr.n_params = (int64_t)n;

    double t_session = now_seconds(), t_last = t_session;
    long session_steps = 0;
    int print_every = o->steps / 50 > 0 ? o->steps / 50 : 1;
    double final_en = NAN, final_zh = NAN;
    int step = start;
    for (;;) {
        int last = step == o->steps;
        int eval_now = last || (o->eval_every > 0 && step % o->eval_every == 0 && step > 0);
        if (eval_now && (n_val == 0 || val_hist[n_val - 1].step != step)) {
            double en = evaluate(&net, &corpus, &vs, LANG_EN), zh = evaluate(&net, &corpus, &vs, LANG_ZH);
            val_hist[n_val++] = (ValRecord){step, en, zh};
            fprintf(stderr, "%sstep %d/%d: val loss en %.4f zh %.4f\n", tty ? "\r\033[K" : "", step, o->steps, en, zh);
        }
        if (last) {
            final_en = val_hist[n_val - 1].en;
            final_zh = val_hist[n_val - 1].zh;
        }
        int save_now = o->checkpoint && step > start &&
                       (last || (o->checkpoint_every > 0 && step % o->checkpoint_every == 0) ||
                        (o->stop_after > 0 && step == o->stop_after));
        if (save_now) {
            double t = now_seconds();
            ck.pr.step = step;
            ck.pr.rng_state = rng.state;
            ck.pr.tokens_seen = tokens_seen;
            ck.pr.wall_seconds = wall_before + (t - t_session);
            ck.pr.n_val = n_val;
            if (checkpoint_save(o->checkpoint, &ck, err, sizeof err)) {
                fprintf(stderr, "micro: %s\n", err);
                goto done;
            }
        }
        if (last || (o->stop_after > 0 && step >= o->stop_after)) break;

        batch_sample(corpus.train, corpus.train_len, &rng, o->batch, o->seq, inputs, targets);
        float loss = train_net_forward(&net, inputs, targets);
        train_net_zero_grad(&net);
        train_net_backward(&net);
        double norm = grad_norm(net.grads, n);
        if (!isfinite(loss) || !isfinite(norm)) {
            fprintf(stderr, "%smicro: step %d: loss %g, gradient norm %g: training diverged\n", tty ? "\n" : "",
                    step + 1, (double)loss, norm);
            goto done;
        }
        float scale = norm > o->grad_clip ? (float)(o->grad_clip / norm) : 1.0f;
        double lr = lr_schedule(step, o->steps, o->warmup, o->lr, o->min_lr_frac);
        adamw_update(&opt, model.params, net.grads, step + 1, (float)lr, scale, net.pool);
        loss_hist[step] = loss;
        tokens_seen += BT;
        step++;
        session_steps++;

        double t = now_seconds();
        double tps = (double)session_steps * BT / (t - t_session);
        if (tty || step % print_every == 0 || step == start + 1) {
            char eta[32];
            fmt_duration((o->steps - step) * (t - t_session) / session_steps, eta, sizeof eta);
            fprintf(stderr, "%sstep %d/%d  loss %.4f  gnorm %.3f  lr %.2e  %.0f tok/s  %.2f s/step  ETA %s%s",
                    tty ? "\r\033[K" : "", step, o->steps, (double)loss, norm, lr, tps, t - t_last, eta,
                    tty ? "" : "\n");
        }
        t_last = t;
    }
    if (tty) fputc('\n', stderr);
    double t_end = now_seconds();
    double session_tps = session_steps ? (double)session_steps * BT / (t_end - t_session) : 0.0;
    ck.pr.step = step;
    ck.pr.tokens_seen = tokens_seen;
    ck.pr.wall_seconds = wall_before + (t_end - t_session);
    ck.pr.n_val = n_val;
    if (step < o->steps) { // stopped early (--stop-after): the checkpoint holds the state
        status = 0;
        goto done;
    }
    if (o->out && model_save(&model, o->out, err, sizeof err)) {
        fprintf(stderr, "micro: %s\n", err);
        goto done;
    }
    if (o->json && write_json(o->json, o, &corpus, &ck, n, core, final_en, final_zh, vs.n, session_tps, err,
                              sizeof err)) {
        fprintf(stderr, "micro: %s\n", err);
        goto done;
    }
    fprintf(stderr, "micro: done: %d steps, %llu tokens, %.0f s; final val loss en %.4f zh %.4f; wrote %s\n", step,
            (unsigned long long)tokens_seen, ck.pr.wall_seconds, final_en, final_zh, o->out ? o->out : "(nothing)");
    status = 0;
done:
    free(inputs);
    free(targets);
    free(vs.inputs);
    free(vs.targets);
    free(vs.starts[0]);
    free(vs.starts[1]);
    free(loss_hist);
    free(val_hist);
    train_net_free(&net);
    adamw_free(&opt);
    if (have_model) model_free(&model);
    corpus_free(&corpus);
    return status;
}
