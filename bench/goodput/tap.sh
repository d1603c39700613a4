#!/bin/bash
# usage: bench/goodput/tap.sh KOSOKU [RUNS] [PCAP]: kosoku on DPDK net_tap (1 worker on CPU 0, sendfile on), curl in
# netns gpab-tap fetching a 32 MiB file RUNS times (MB/s per run, 10^6 B/s) after a warm-up; optional pcap of one
# more transfer (stalls.py reads it). Env: GP_WORK (default /tmp/kosoku-goodput), AUTOGROUP_NICE (written to
# kosoku's /proc/PID/autogroup: with CONFIG_SCHED_AUTOGROUP, nice only orders tasks inside one session), NSTAT=1
# (the client netns TCP counters), KENV (env for kosoku), RPS_CPUS (hex CPU mask written to the tap's
# queues/rx-0/rps_cpus in the client netns: Receive Packet Steering, e.g. 2 = the kernel's receive of kosoku's
# frames runs on CPU 1 instead of inside kosoku's writev on CPU 0), GP_NAME (name prefix, default gpab).
# Prints the polling worker's on-CPU and run-queue wait.
# Root, /dev/net/tun and netns needed; names: tap gpabtap0, netns gpab-tap, 10.93.53.0/24, EAL --file-prefix gpab.
N=${GP_NAME:-gpab}; K=$1; RUNS=${2:-3}; PCAP=$3; tap=${N}tap0; ns=$N-tap
. "$(dirname "$0")/common.sh"
d=$G/run; rm -rf $d; mkdir -p $d
write_conf $d 8080 "network dpdk;
dpdk {
    eal -l 0 --no-huge --no-shconf --no-pci --no-telemetry --log-level=notice --file-prefix $N --vdev=net_tap0,iface=$tap;
    address 10.93.53.2/24;
}
"
timeout 120 nice -n -10 env $KENV $K -c $d/kosoku.conf -p $d/ > $d/out.txt 2>&1 &
KP=$!
for i in $(seq 100); do grep -q " started: " $d/error.log 2>/dev/null && break; sleep 0.1; done
ip netns del $ns 2>/dev/null; ip netns add $ns; ip link set $tap netns $ns; ip -n $ns addr add 10.93.53.1/24 dev $tap; ip -n $ns link set $tap up
[ -n "$RPS_CPUS" ] && ip netns exec $ns sh -c "echo $RPS_CPUS > /sys/class/net/$tap/queues/rx-0/rps_cpus"
url=http://10.93.53.2:8080/32m.bin
for i in 1 2 3 4 5 6 7 8 9 10; do r=$(ip netns exec $ns curl -sS -m 30 -o /dev/null -w '%{speed_download}' $url 2>/dev/null); [ "${r%.*}" -gt 0 ] 2>/dev/null && break; sleep 0.2; done
KPID=$(pgrep -P $KP | head -1)
# the busiest thread (the polling worker, pinned to CPU 0): on-CPU and run-queue wait, ms
WT=$(for t in /proc/$KPID/task/*; do echo "$(awk '{print $1}' $t/schedstat) $t"; done | sort -n | tail -1 | cut -d' ' -f2)
sched() { awk '{printf "%d %d", $1/1e6, $2/1e6}' $WT/schedstat; }
[ -n "$AUTOGROUP_NICE" ] && echo $AUTOGROUP_NICE > /proc/$KPID/autogroup
out=""; sch=""
for i in $(seq $RUNS); do
  s0=$(sched); t0=$(date +%s%N)
  r=$(ip netns exec $ns curl -sS --fail -m 60 -o /dev/null -w '%{speed_download}' $url)
  t1=$(date +%s%N); s1=$(sched)
  out="$out $(python3 -c "print(round($r/1e6,1))")"
  sch="$sch $(python3 -c "a='$s0'.split(); b='$s1'.split(); print(f'{($t1-$t0)/1e6:.0f}/{int(b[0])-int(a[0])}/{int(b[1])-int(a[1])}')")"
done
C="TcpExt(TCPRcvCollapsed|PruneCalled|RcvPruned|TCPBacklogDrop|TCPRcvQDrop|TCPOFOQueue|TCPZeroWindowDrop"
C="$C|TCPDelayedACKs|DelayedACKLocked|TCPQuickAck|TCPBacklogCoalesce|TCPHPHits|TCPPureAcks|TCPSACKRecovery"
C="$C|TCPLostRetransmit|TCPRcvCoalesce|TCPFromZeroWindowAdv|TCPToZeroWindowAdv|TCPWantZeroWindowAdv)"
C="$C|IpInReceives|TcpInSegs|TcpOutSegs|TcpRetransSegs"
[ -n "$NSTAT" ] && ip netns exec $ns nstat -a 2>/dev/null | grep -E "$C" | awk '{printf "%s=%s ", $1, $2} END {print ""}'
echo "tap${RPS_CPUS:+ rps_cpus=$RPS_CPUS} MB/s:$out  (wall/worker on-CPU/worker runqueue-wait ms per run:$sch)"
if [ -n "$PCAP" ]; then
  ip netns exec $ns timeout 60 tcpdump -i $tap -s 96 -w $PCAP -nn tcp port 8080 2>/dev/null &
  TP=$!; sleep 1
  ip netns exec $ns curl -sS --fail -m 60 -o /dev/null -w 'pcap run %{speed_download}\n' $url
  sleep 0.5; kill $TP; wait $TP 2>/dev/null
fi
kill $KP; wait $KP 2>/dev/null
ip netns del $ns
