# micro attention's figure: the fp32 cache's attention weights of a window of queries beside the
# chosen cache's, each query's most-attended position marked, red where the two disagree.
# ARG1: the output; ARG2: the data folder (fp32.mat and scheme.mat, queries x keys; top.dat: query,
# top fp32, top scheme, same); ARG3: the title; ARG4: the first query's position; ARG5: the spec.
D = ARG2
first = int(ARG4)
set termoption noenhanced
set multiplot layout 1,2 title ARG3.": does the cache still pick out the right positions?"
set xlabel "key position"
set ylabel "query position"
set cblabel "attention weight (square root, so small weights show)"
set palette defined (0 "white", 0.05 "#d0e0f0", 0.3 "#4477aa", 1 "#102040")
set cbrange [0:1]
set key below
set yrange [*:*] reverse
set autoscale xfix
set autoscale yfix
set offsets 0, 0, 0.5, 0.5
set title "fp32 cache"
plot D."/fp32.mat" matrix using 1:($2 + first):(sqrt($3)) with image notitle, \
     D."/top.dat" using 2:($1 + first) with points pt 6 ps 0.8 lc rgb "#ff8800" title "most attended"
set title ARG5
plot D."/scheme.mat" matrix using 1:($2 + first):(sqrt($3)) with image notitle, \
     D."/top.dat" using ($4 > 0.5 ? $3 : 1/0):($1 + first) with points pt 6 ps 0.8 lc rgb "#ff8800" title "most attended, as fp32", \
     D."/top.dat" using ($4 > 0.5 ? 1/0 : $3):($1 + first) with points pt 7 ps 0.9 lc rgb "#dd0000" title "most attended, not fp32's"
unset multiplot
