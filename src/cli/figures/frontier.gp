# The frontier: real bits per cached number (metadata included) against the loss increase over
# fp32 (log scale), one panel per text, every family with its own marker, the Pareto frontier as a
# line, and the plate's published points.
# ARG1: the output; ARG2: the data folder; ARG3: how many texts; ARG4: how many families.
# The data folder holds texts and families (one name a line, read as data), plate_points.dat, and
# frontier.dat: per text (from 1) two blocks, its frontier ("bits increase" lines, block 2t - 2)
# and its points ("bits increase pointtype linecolor" lines, block 2t - 1, each family's marker as
# its key entry below draws it), so that gnuplot reads each point once whatever the families.
D = ARG2
nt = int(ARG3)
nf = int(ARG4)
array texts[nt]
array families[nf]
# Names are read as data: a tab-separated column, nothing in them a comment.
set datafile separator "\t"
set datafile commentschars ""
stats D."/texts" using (texts[int($0) + 1] = strcol(1), 0) nooutput
stats D."/families" using (families[int($0) + 1] = strcol(1), 0) nooutput
set datafile separator whitespace
set datafile commentschars "#"
set termoption noenhanced
set multiplot layout 1,nt title "micro: what each bit of cache buys (Pareto frontier over every scheme swept)"
set logscale y
set yrange [1e-4:10]
set xrange [1:17]
set logscale x 2
set xtics (1, 2, 3, 4, 5, 6, 8, 16)
set grid
set xlabel "bits per cached number (metadata included, log scale)"
set ylabel "increase over fp32, nats/token (bottom edge: 1e-4 or less)"
set key top right font ",8"
do for [t = 1:nt] {
    set title texts[t]
    plot D."/frontier.dat" index (2 * t - 2) using 1:2 with lines lw 2 lc rgb "black" title "frontier", \
         D."/frontier.dat" index (2 * t - 1) using 1:2:3:4 with points pt variable ps 1.2 lc variable notitle, \
         for [f = 1:nf] keyentry with points pt ((f - 1) % 13 + 1) ps 1.2 lc ((f - 1) % 8 + 1) title families[f], \
         D."/plate_points.dat" using 1:2 with points pt 3 ps 2 lc rgb "black" title "the plate (published)"
}
unset multiplot
