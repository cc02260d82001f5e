#!/usr/bin/env bash
# Nsight Compute on one chosen config of an op (OP, default wq_gemm; GPU
# machine, repo root, the install tree in .dist): imports the config into a
# fresh cache (qjit import verifies and times it), then profiles `qjit bench`
# of it. Writes $OUT/ncu_NAME.txt and prints the headline metrics.
#   usage: [OP=w8a8_gemm] [KERNEL=regex of the kernel profiled, default qjit_] bash tests/ncu_config.sh SHAPE CONFIG_JSON NAME
#   e.g.   bash tests/ncu_config.sh k=4096,n=11008,m=256 \
#            '{"family":"wgmma","groups":2,"rows":256,"stages":3,"chunks":1,"split":4}' s4
#          OP=w8a8_gemm bash tests/ncu_config.sh k=4096,n=11008,block=128,m=16 \
#            '{"family":"stream","warps":8,"tiles":1,"splits":4,"unroll":2}' stream16
set -u
[ $# -eq 3 ] || { sed -n 2,11p "$0"; exit 2; }
OP=${OP:-wq_gemm}
Q=${DIST:-.dist}/bin/qjit
OUT=${OUT:-/tmp}
export QJIT_CACHE=/tmp/ncu_config_$3.db
rm -f "$QJIT_CACHE"
spec=$(python3 -c "
import json, sys
d = {k: (int(v) if v.isdigit() else v) for k, v in (kv.split('=') for kv in sys.argv[1].split(','))}
d['op'] = sys.argv[2]
print(json.dumps(d))" "$1" "$OP")
echo "{\"format\":\"qjit-record-v1\",\"spec\":$spec,\"config\":$2}" | "$Q" import - 2>&1 | tail -1
ncu --clock-control none -k regex:${KERNEL:-qjit_} --launch-skip 3 --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats \
    --metrics lts__t_sectors.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum.per_second,l1tex__throughput.avg.pct_of_peak_sustained_active,sm__cycles_active.avg \
    "$Q" bench --op "$OP" --shape "$1" >"$OUT/ncu_$3.txt" 2>&1
grep -E "Duration|DRAM Through|L2 Hit|lts__|l1tex__thr|Issue Slots|No Eligible|sm__cycles_active|Achieved Occ|Waves" \
  "$OUT/ncu_$3.txt" | sed "s/^/$3 /"
