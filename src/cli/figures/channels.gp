# micro inspect --plot's figure: per layer, every channel's max |x| over the text of keys as cached
# and of values, without and with the rotation (KIVI's observation: keys have outlier channels).
# ARG1: the output; ARG2: the data folder (profiles.dat: layer, stream 0 keys / 1 values, channel,
# plain, rotated); ARG3: the title; ARG4: the layers; ARG5: the head's width.
D = ARG2
layers = int(ARG4)
hd = int(ARG5)
set termoption noenhanced
set multiplot layout layers,2 title ARG3
set grid xtics
set xtics hd
set key top right
set yrange [0:*]
set style data lines
do for [l = 0:layers - 1] {
    do for [s = 0:1] {
        set title sprintf("layer %d, %s: channel = head x %d + dimension", l, s == 0 ? "keys (as cached)" : "values", hd)
        plot D."/profiles.dat" using ($1 == l && $2 == s ? $3 : 1/0):4 lw 1.5 lc rgb "#4477aa" title "plain", \
             '' using ($1 == l && $2 == s ? $3 : 1/0):5 lw 1.5 lc rgb "#cc6677" title "rotated"
    }
}
unset multiplot
