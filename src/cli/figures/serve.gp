# The measured panel (d): conversations one paged pool holds per width against the arithmetic
# (bars, left), and the decode tokens/s they reach (right).
# ARG1: the output; ARG2: the data folder (serve.dat: "label" held plain metadata tokens/s).
D = ARG2
set termoption noenhanced
set multiplot layout 1,2 title "micro, measured: one paged cache pool, conversations decoded together"
set title "Conversations held at once"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.7
set yrange [0:*]
set xtics rotate by -30
set key top left
set grid ytics
plot D."/serve.dat" using 2:xtic(1) title "held (measured)" lc rgb "#4477aa", \
     '' using 4 title "arithmetic with metadata" lc rgb "#88aa44", \
     '' using 3 title "arithmetic, 16/b" lc rgb "#cccccc"
set title "Aggregate decode at the end of the context (tokens/s)"
unset key
plot D."/serve.dat" using 5:xtic(1) lc rgb "#aa4444"
unset multiplot
