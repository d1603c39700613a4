#!/bin/bash
# usage: bench/goodput/veth.sh KOSOKU [RUNS]: the reference for tap.sh, the same kosoku binary on kernel sockets in
# netns gpab-vs, curl in netns gpab-vc over a veth pair (10.94.53.0/24), same 32 MiB file. Env: GP_WORK,
# AUTOGROUP_NICE as tap.sh.
K=$1; RUNS=${2:-3}
. "$(dirname "$0")/common.sh"
d=$G/vrun; rm -rf $d; mkdir -p $d
for ns in gpab-vs gpab-vc; do ip netns del $ns 2>/dev/null; ip netns add $ns; ip -n $ns link set lo up; done
ip link add gpabv0 netns gpab-vs type veth peer name gpabv1 netns gpab-vc
ip -n gpab-vs addr add 10.94.53.2/24 dev gpabv0; ip -n gpab-vc addr add 10.94.53.1/24 dev gpabv1
ip -n gpab-vs link set gpabv0 up; ip -n gpab-vc link set gpabv1 up
write_conf $d 10.94.53.2:8080
ip netns exec gpab-vs timeout 120 nice -n -10 $K -c $d/kosoku.conf -p $d/ > $d/out.txt 2>&1 &
KP=$!
for i in $(seq 100); do grep -q " started: " $d/error.log 2>/dev/null && break; sleep 0.1; done
KPID=$(pgrep -P $KP | head -1); KPID2=$(pgrep -P $KPID | head -1); KPID=${KPID2:-$KPID}
[ -n "$AUTOGROUP_NICE" ] && echo $AUTOGROUP_NICE > /proc/$KPID/autogroup
url=http://10.94.53.2:8080/32m.bin
ip netns exec gpab-vc curl -sS -m 30 -o /dev/null $url
out=""
for i in $(seq $RUNS); do r=$(ip netns exec gpab-vc curl -sS --fail -m 60 -o /dev/null -w '%{speed_download}' $url); out="$out $(python3 -c "print(round($r/1e6,1))")"; done
echo "veth MB/s:$out"
kill $KP; wait $KP 2>/dev/null
ip netns del gpab-vs; ip netns del gpab-vc
