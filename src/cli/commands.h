// Every subcommand main.c dispatches to; each returns the process exit status.
#ifndef MICRO_COMMANDS_H
#define MICRO_COMMANDS_H

int cmd_eval(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_capacity(int argc, char **argv);
int cmd_plate(int argc, char **argv);
// The loss runs `micro plate` makes on each of its texts: the fp32 reference and every scheme of its
// panels (a) and (b) (bench --eval counts their arithmetic).
int plate_loss_runs(void);
// The plates' default lengths in characters (the published table's first 1500 and 500).
#define PLATE_EN_CHARS 1500
#define PLATE_ZH_CHARS 500
int cmd_inspect(int argc, char **argv);
int cmd_serve_bench(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_attention(int argc, char **argv);
int cmd_figure(int argc, char **argv);

#endif
