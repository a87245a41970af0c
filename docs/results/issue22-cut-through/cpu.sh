#!/bin/bash
# sample /proc/stat every second: print busy% (user,nice,sys,irq,softirq,steal) per interval
prev=($(head -1 /proc/stat))
while true; do sleep 1; cur=($(head -1 /proc/stat));
 u=$((cur[1]-prev[1])); n=$((cur[2]-prev[2])); s=$((cur[3]-prev[3])); i=$((cur[4]-prev[4])); w=$((cur[5]-prev[5])); irq=$((cur[6]-prev[6])); si=$((cur[7]-prev[7])); st=$((cur[8]-prev[8]));
 tot=$((u+n+s+i+w+irq+si+st)); echo "$(date +%s) user=$((100*u/tot)) sys=$((100*s/tot)) softirq=$((100*si/tot)) idle=$((100*i/tot)) iowait=$((100*w/tot)) steal=$((100*st/tot))";
 prev=("${cur[@]}"); done
