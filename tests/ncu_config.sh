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
#   CONFIG_JSON "best": the winner cached for SHAPE in the cache file $FROM (e.g. the one a
#   tests/gpu_qconv2d.sh bench of the same call left, /tmp/qjit_qconv2d.db), so one call tunes,
#   benches and profiles:  FROM=/tmp/qjit_qconv2d.db OP=qconv2d KERNEL=igemm_ring \
#            bash tests/ncu_config.sh n=8,ci=512,h=14,w=14,co=512,pad_h=1,pad_w=1,layout=nhwc best qc8
set -u
[ $# -eq 3 ] || { sed -n 2,15p "$0"; exit 2; }
OP=${OP:-wq_gemm}
Q=${DIST:-.dist}/bin/qjit
OUT=${OUT:-/tmp}
config=$2
if [ "$config" = best ]; then
  config=$("$Q" show --op "$OP" --shape "$1" --cache "${FROM:?FROM names the cache that holds the winner}" --json |
           python3 -c "import json, sys; print(json.dumps(json.load(sys.stdin)[0]['config']))" 2>/dev/null) ||
    { echo "$3: no cached winner for $OP $1 in $FROM"; exit 1; }
  echo "$3 profiles $config"
fi
export QJIT_CACHE=/tmp/ncu_config_$3.db
rm -f "$QJIT_CACHE"
spec=$(python3 -c "
import json, sys
d = {k: (int(v) if v.isdigit() else v) for k, v in (kv.split('=') for kv in sys.argv[1].split(','))}
d['op'] = sys.argv[2]
print(json.dumps(d))" "$1" "$OP")
echo "{\"format\":\"qjit-record-v1\",\"spec\":$spec,\"config\":$config}" | "$Q" import - 2>&1 | tail -1
ncu --clock-control none -k regex:${KERNEL:-qjit_} --launch-skip 3 --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats \
    --metrics lts__t_sectors.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum.per_second,l1tex__throughput.avg.pct_of_peak_sustained_active,sm__cycles_active.avg \
    "$Q" bench --op "$OP" --shape "$1" >"$OUT/ncu_$3.txt" 2>&1
grep -E "Duration|DRAM Through|L2 Hit|lts__|l1tex__thr|Issue Slots|No Eligible|sm__cycles_active|Achieved Occ|Waves" \
  "$OUT/ncu_$3.txt" | sed "s/^/$3 /"
