# Panel (g): bytes of cache per token (metadata included, log scale) against the loss increase over
# micro's fp32 cache (log scale), one panel per text, one marker per architecture, the Pareto
# frontier over all of them as a line: what each byte of cache buys, whatever the attention.
# ARG1: the output; ARG2: the data folder; ARG3: how many texts; ARG4: how many architectures.
# The data folder holds arch_texts and archs (one name a line, read as data) and arch.dat: per text (from
# 1) two blocks, its frontier ("bytes increase" lines, block 2t - 2) and its points ("bytes increase
# pointtype linecolor" lines, block 2t - 1, each architecture's marker as its key entry draws it).
D = ARG2
nt = int(ARG3)
na = int(ARG4)
array texts[nt]
array archs[na]
set datafile separator "\t"
set datafile commentschars ""
stats D."/arch_texts" using (texts[int($0) + 1] = strcol(1), 0) nooutput
stats D."/archs" using (archs[int($0) + 1] = strcol(1), 0) nooutput
set datafile separator whitespace
set datafile commentschars "#"
set termoption noenhanced
set multiplot layout 1,nt title "micro: fewer numbers (grouped-query, latent attention) and fewer bits (cache quantisation)"
set logscale x
set logscale y
set yrange [1e-4:10]
set grid
set xlabel "bytes of cache per token (all layers, metadata included, log scale)"
set ylabel "increase over micro's fp32 cache, nats/token (bottom edge: 1e-4 or less)"
set key top right font ",9"
do for [t = 1:nt] {
    set title texts[t]
    plot D."/arch.dat" index (2 * t - 2) using 1:2 with lines lw 2 lc rgb "black" title "frontier", \
         D."/arch.dat" index (2 * t - 1) using 1:2:3:4 with points pt variable ps 1.4 lc variable notitle, \
         for [a = 1:na] keyentry with points pt (a * 2 + 3) ps 1.4 lc a title archs[a]
}
unset multiplot
