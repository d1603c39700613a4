#!/bin/bash
# usage: bench/goodput/veth.sh KOSOKU [RUNS]: the reference for tap.sh, the same kosoku binary on kernel sockets in
# netns gpab-vs, curl in netns gpab-vc over a veth pair (10.94.53.0/24), same 32 MiB file. Env: GP_WORK,
# AUTOGROUP_NICE, RPS_CPUS (on the client's veth rx-0) and GP_NAME as tap.sh; OFFLOADS_OFF=1: ethtool -K tso off
# gso off on the server's veth, gro off on the client's ("frames as on the tap": 1448-byte segments both ways).
N=${GP_NAME:-gpab}; K=$1; RUNS=${2:-3}; vs=$N-vs; vc=$N-vc; v0=${N}v0; v1=${N}v1
. "$(dirname "$0")/common.sh"
d=$G/vrun; rm -rf $d; mkdir -p $d
for ns in $vs $vc; do ip netns del $ns 2>/dev/null; ip netns add $ns; ip -n $ns link set lo up; done
ip link add $v0 netns $vs type veth peer name $v1 netns $vc
ip -n $vs addr add 10.94.53.2/24 dev $v0; ip -n $vc addr add 10.94.53.1/24 dev $v1
ip -n $vs link set $v0 up; ip -n $vc link set $v1 up
[ -n "$RPS_CPUS" ] && ip netns exec $vc sh -c "echo $RPS_CPUS > /sys/class/net/$v1/queues/rx-0/rps_cpus"
if [ -n "$OFFLOADS_OFF" ]; then
  ip netns exec $vs ethtool -K $v0 tso off gso off && ip netns exec $vc ethtool -K $v1 gro off || exit 1
fi
write_conf $d 10.94.53.2:8080
ip netns exec $vs timeout 120 nice -n -10 $K -c $d/kosoku.conf -p $d/ > $d/out.txt 2>&1 &
KP=$!
for i in $(seq 100); do grep -q " started: " $d/error.log 2>/dev/null && break; sleep 0.1; done
KPID=$(pgrep -P $KP | head -1); KPID2=$(pgrep -P $KPID | head -1); KPID=${KPID2:-$KPID}
[ -n "$AUTOGROUP_NICE" ] && echo $AUTOGROUP_NICE > /proc/$KPID/autogroup
url=http://10.94.53.2:8080/32m.bin
ip netns exec $vc curl -sS -m 30 -o /dev/null $url
out=""
for i in $(seq $RUNS); do r=$(ip netns exec $vc curl -sS --fail -m 60 -o /dev/null -w '%{speed_download}' $url); out="$out $(python3 -c "print(round($r/1e6,1))")"; done
echo "veth${RPS_CPUS:+ rps_cpus=$RPS_CPUS}${OFFLOADS_OFF:+ tso/gso/gro off} MB/s:$out"
kill $KP; wait $KP 2>/dev/null
ip netns del $vs; ip netns del $vc
