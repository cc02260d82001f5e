#!/usr/bin/env python3
"""The fastest ok trial of a cached kernel for each value of some config keys
(an A/B from one tuner run; trials only screened by the staged search are
left out: tune with --exhaustive for a full A/B): reads `qjit show --json`
output on stdin.

    qjit show --op wq_gemm --shape k=4096,n=11008,m=256 --json | python3 tests/best_by_key.py ws groups

A key a config lacks counts as 0 (the optional keys' default) unless named
with a default, as in split=1.
"""
import json
import sys


def main():
    keys = []
    for arg in sys.argv[1:]:
        name, _, default = arg.partition("=")
        keys.append((name, int(default) if default else 0))
    data = json.load(sys.stdin)
    for rec in data if isinstance(data, list) else [data]:
        best = {}
        for t in rec.get("trials", []):
            c = t["config"]
            if t["status"] != "ok" or t.get("screened") or "baseline" in c:
                continue
            group = tuple(c.get(k, d) for k, d in keys)
            if group not in best or t["median_us"] < best[group]["median_us"]:
                best[group] = t
        print(rec.get("spec", rec.get("label", "")))
        for group, t in sorted(best.items(), key=lambda kv: kv[1]["median_us"]):
            label = " ".join(f"{k}={v}" for (k, _), v in zip(keys, group))
            print(f"  {label:<24} {t['median_us']:8.2f} us  {json.dumps(t['config'], separators=(',', ':'))}")


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # a reader such as `head` stopped early: the lines it took were printed
        sys.stderr.close()
