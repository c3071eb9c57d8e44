# The plate's figure: left, the loss increase per cache width on a log scale (English and Chinese,
# the plate's scheme and KIVI, with the plate's published points); right, the conversations of
# Llama 3 8B that fit on an 80 GB GPU per width.
# ARG1: the output (set before this text); ARG2: the data folder, written by micro (figure_csv.c).
D = ARG2
set multiplot layout 1,2 title "micro: what a quantised KV cache costs, and what it buys"
set title "Loss increase over the fp32 cache (nats/token)"
set logscale y
set yrange [1e-4:3]
set logscale x 2
set xrange [18:1.8]
set xtics (16, 8, 4, 3, 2)
set xlabel "bits per cached number (nominal, log scale)"
set ylabel "increase (log scale; bottom edge = 1e-4 or less)"
set key top left
set grid
plot D."/int_en.dat" using 1:2 with linespoints lw 2 pt 7 title "int, English", \
     D."/int_zh.dat" using 1:2 with linespoints lw 2 pt 5 title "int, Chinese", \
     D."/kivi_en.dat" using 1:2 with linespoints lw 2 dt 2 pt 7 title "KIVI, English", \
     D."/kivi_zh.dat" using 1:2 with linespoints lw 2 dt 2 pt 5 title "KIVI, Chinese", \
     D."/hadamard_en.dat" using 1:2 with linespoints lw 2 dt 3 pt 6 lc rgb "#b22222" title "int + Hadamard, English", \
     D."/outliers_en.dat" using 1:2 with linespoints lw 2 dt 4 pt 4 lc rgb "#1f4e79" title "int + 1% outliers, English", \
     D."/published.dat" using 1:2 with points pt 3 ps 2 lc rgb "black" title "the plate (published)"
unset logscale
set title "Llama 3 8B, 80 GB GPU at 90%, 8192-token conversations"
set yrange [0:*]
set xrange [-0.6:*]
set xtics ()
set xlabel "bits per cached number (scales ignored, as the plate does)"
set ylabel "conversations that fit"
set style fill solid 0.6
set boxwidth 0.6
unset key
plot D."/capacity.dat" using 0:2:xtic(1) with boxes lc rgb "#4477aa", \
     '' using 0:2:2 with labels offset 0,0.8
unset multiplot
