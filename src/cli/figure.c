#include "figure.h"
#include "msgtext.h"
#include "safe_file.h"
#include "subprocess.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHOWN(p) msg_text((p), (char[MSG_TEXT]){0}, MSG_TEXT)

int figure_data_open(FigureData *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    const char *tmp = getenv("TMPDIR");
    struct stat st;
    if (!tmp || !*tmp || stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode)) tmp = "/tmp";
    if (snprintf(d->dir, sizeof d->dir, "%s/micro-figure-XXXXXX", tmp) >= (int)sizeof d->dir) tmp = "/tmp";
    snprintf(d->dir, sizeof d->dir, "%s/micro-figure-XXXXXX", tmp);
    safe_track(d->dir);
    if (!mkdtemp(d->dir)) {
        safe_untrack(d->dir);
        snprintf(err, errlen, "cannot make a temporary folder in %s: %s", SHOWN(tmp), strerror(errno));
        d->dir[0] = 0;
        return -1;
    }
    return 0;
}

FILE *figure_data_file(FigureData *d, const char *name, char *err, size_t errlen) {
    const size_t n = strlen(d->dir) + strlen(name) + 2;
    char *path = d->n_files < FIGURE_FILES ? malloc(n) : NULL;
    if (!path) {
        snprintf(err, errlen, "cannot write the figure's data: %s", d->n_files < FIGURE_FILES ? "out of memory" : "too many files");
        return NULL;
    }
    snprintf(path, n, "%s/%s", d->dir, name);
    d->files[d->n_files++] = path;
    safe_track(path);
    FILE *f = fopen(path, "wx");
    if (!f) snprintf(err, errlen, "cannot write the figure's data %s: %s", SHOWN(path), strerror(errno));
    return f;
}

int figure_data_done(FILE *f, const char *name, char *err, size_t errlen) {
    const int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        snprintf(err, errlen, "cannot write the figure's data (%s): %s", name, strerror(errno ? errno : EIO));
        return -1;
    }
    return 0;
}

void figure_data_close(FigureData *d) {
    for (int i = 0; i < d->n_files; i++) {
        unlink(d->files[i]);
        safe_untrack(d->files[i]);
        free(d->files[i]);
    }
    d->n_files = 0;
    if (d->dir[0]) {
        rmdir(d->dir);
        safe_untrack(d->dir);
        d->dir[0] = 0;
    }
}

int figure_check_outputs(const char *out_dir, const char *stem, char *err, size_t errlen) {
    static const char *const ext[] = {"svg", "png"};
    char path[4300];
    for (int i = 0; i < 2; i++) {
        if (snprintf(path, sizeof path, "%s/%s.%s", out_dir, stem, ext[i]) >= (int)sizeof path) {
            snprintf(err, errlen, "--out: the folder name is too long");
            return -1;
        }
        if (safe_check_output(path, err, errlen)) return -1;
    }
    return 0;
}

static const char *program_text(const char *name) {
    for (int i = 0; i < figure_program_count; i++)
        if (!strcmp(figure_programs[i].name, name)) return figure_programs[i].text;
    return NULL;
}

// The program as run, written as the data folder's newest file: its terminal (numbers only, nothing
// a user gave) and output, then its text.
static int write_program(FigureData *d, const FigureSpec *f, int png, char *err, size_t errlen) {
    const char *text = program_text(f->program);
    if (!text) {
        snprintf(err, errlen, "no figure program called %s", f->program);
        return -1;
    }
    char name[64];
    snprintf(name, sizeof name, "%s.%s.gp", f->program, png ? "png" : "svg");
    FILE *gp = figure_data_file(d, name, err, errlen);
    if (!gp) return -1;
    if (!png)
        fprintf(gp, "set terminal svg size %d,%d dynamic font 'sans,%d'\n", f->width, f->height, f->font_svg);
    else
        fprintf(gp,
                "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
                "    set terminal pngcairo size %d,%d font 'sans,%d'\n"
                "} else {\n"
                "    set terminal png size %d,%d\n"
                "}\n",
                f->width, f->height, f->font_png, f->width, f->height);
    fprintf(gp, "set output ARG1\n%s", text);
    return figure_data_done(gp, name, err, errlen);
}

// gnuplot's last non-empty line of complaint, escaped for a message ("" when it said nothing).
static void last_complaint(const char *path, char *out, size_t n) {
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512], last[512] = "";
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (line[strspn(line, " \t^")]) snprintf(last, sizeof last, "%s", line);
    }
    fclose(f);
    if (last[0]) msg_text(last, out, n);
}

int figure_draw(FigureData *d, const FigureSpec *f, char *err, size_t errlen) {
    char gnuplot[4096];
    if (spawn_find("gnuplot", gnuplot, sizeof gnuplot)) {
        snprintf(err, errlen, "gnuplot is missing: apt-get install gnuplot-nox");
        return FIGURE_NO_GNUPLOT;
    }
    static const char *const ext[] = {"svg", "png"};
    for (int png = 0; png < 2; png++) {
        if (write_program(d, f, png, err, errlen)) return FIGURE_FAILED;
        const char *script = d->files[d->n_files - 1];
        char errname[64], target[4300];
        snprintf(errname, sizeof errname, "%s.%s.err", f->program, ext[png]);
        FILE *ef = figure_data_file(d, errname, err, errlen);
        if (!ef) return FIGURE_FAILED;
        fclose(ef);
        const char *err_path = d->files[d->n_files - 1];
        if (snprintf(target, sizeof target, "%s/%s.%s", f->out_dir, f->stem, ext[png]) >= (int)sizeof target) {
            snprintf(err, errlen, "--out: the folder name is too long");
            return FIGURE_FAILED;
        }
        SafeFile out;
        if (safe_open(&out, target, err, errlen)) return FIGURE_FAILED;
        const char *argv[12] = {gnuplot, "-c", script, out.tmp, d->dir};
        int argc = 5;
        for (int i = 0; i < 6 && f->args[i]; i++) argv[argc++] = f->args[i];
        argv[argc] = NULL;
        char why[600];
        const int rc = spawn_wait((char *const *)argv, NULL, err_path, why, sizeof why);
        struct stat st;
        if (rc != 0 || stat(out.tmp, &st) != 0 || st.st_size == 0) {
            char said[MSG_TEXT];
            last_complaint(err_path, said, sizeof said);
            if (rc < 0)
                snprintf(err, errlen, "cannot draw %s: %s", SHOWN(target), why);
            else
                snprintf(err, errlen, "cannot draw %s: gnuplot %s%s%s", SHOWN(target),
                         rc ? "failed" : "wrote nothing", said[0] ? ": " : "", said);
            safe_abort(&out);
            return FIGURE_FAILED;
        }
        if (safe_commit(&out, err, errlen)) return FIGURE_FAILED;
    }
    return FIGURE_DRAWN;
}

int figure_finish(FigureData *d, const FigureSpec *f, const char *data_err) {
    char err[600];
    int rc = FIGURE_FAILED;
    if (data_err)
        snprintf(err, sizeof err, "%s", data_err);
    else
        rc = figure_draw(d, f, err, sizeof err);
    figure_data_close(d);
    if (rc == FIGURE_FAILED) {
        fprintf(stderr, "micro: %s\n", err);
        return 2;
    }
    if (rc == FIGURE_NO_GNUPLOT)
        printf("figure: %s\n", err);
    else
        printf("figure: %s/%s.svg and .png\n", SHOWN(f->out_dir), f->stem);
    return 0;
}
