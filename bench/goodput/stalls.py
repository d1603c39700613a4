#!/usr/bin/env python3
"""usage: bench/goodput/stalls.py PCAP [SERVER_IP.PORT]: the stalls of one server->client transfer in a pcap (tap.sh's):
gaps > 0.5 ms between the server's data segments, with the bytes sent and still unacknowledged (as seen by the
capture) when each began, and the distribution of gaps between the client's ACKs."""
import re
import signal
import subprocess
import sys

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`

txt = subprocess.run(["tcpdump","-r",sys.argv[1],"-nn","-tt","-S"],capture_output=True,text=True).stdout.splitlines()
srv = sys.argv[2] if len(sys.argv) > 2 else "10.93.53.2.8080"
base=None; last_data_t=None; snd_max=0; acked=0; t0=None; tend=None
stalls=[]; acks=[]; last_ack_t=None; ack_gaps=[]
for l in txt:
    m = re.match(r"(\d+\.\d+) IP (\S+) > (\S+): Flags \[([^\]]*)\], (.*)", l)
    if not m: continue
    t=float(m.group(1)); src=m.group(2); rest=m.group(5)
    if src==srv:
        sm=re.search(r"seq (\d+):(\d+)", rest)
        if not sm: continue
        if base is None: base=int(sm.group(1))
        s,e=int(sm.group(1))-base,int(sm.group(2))-base
        if t0 is None: t0=t
        if last_data_t is not None and t-last_data_t>0.0005:
            stalls.append((t-last_data_t, last_data_t-t0, snd_max, snd_max-acked))
        last_data_t=t; snd_max=max(snd_max,e); tend=t
    else:
        am=re.search(r"ack (\d+)", rest)
        if am and base is not None:
            a=int(am.group(1))-base
            if last_ack_t is not None: ack_gaps.append(t-last_ack_t)
            last_ack_t=t
            acked=max(acked,a)
print(f"transfer {tend-t0:.3f}s, {snd_max/1e6:.1f} MB, {snd_max/(tend-t0)/1e6:.0f} MB/s; stalls >0.5ms: {len(stalls)} total {sum(s[0] for s in stalls):.3f}s")
for s in stalls[:15]: print(f"  gap {s[0]*1e3:6.2f} ms at t={s[1]*1e3:7.1f} ms, sent {s[2]}, in flight {s[3]}")
ack_gaps.sort(); n=len(ack_gaps)
if n: print(f"ack gaps: n={n} median {ack_gaps[n//2]*1e6:.0f}us p99 {ack_gaps[int(n*.99)]*1e3:.2f}ms max {ack_gaps[-1]*1e3:.2f}ms")
