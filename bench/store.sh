#!/bin/bash
# bench/store.sh [RECORDS] [RUNS] -- how long `ag-box ls` and `ag-box status` take with many box
# records, on a loopback store and on one 50 ms away (the rig's S3 fault proxy adding 25 ms each
# way; this kernel has no netem). Boots nodeA and nodeB, fills a bucket of its own with RECORDS
# (default 200) parked records, runs each command RUNS times (default 5) on nodeB and prints the
# median and the ratio of status to ls; with the node's record cache (records read before and
# unchanged since, by ETag) and without it (every record read).
set -euo pipefail
trap 'echo "bench/store.sh: failed at line $LINENO" >&2' ERR
cd "$(dirname "$0")/.."
RECORDS=${1:-200}
RUNS=${2:-5}
BUCKET=bench-store
cargo build --release -q
trap 'tests/rig.sh down' EXIT
tests/rig.sh up nodeA nodeB
install -m 755 target/release/ag-box "$(tests/rig.sh dir nodeB)/opt-box/bin/ag-box"
on() { tests/rig.sh exec nodeB bash -c "$1"; }

on "curl -sf -X PUT http://10.200.0.1:5001/$BUCKET >/dev/null
    rm -rf /root/bench-records && mkdir -p /root/bench-records && cd /root/bench-records
    for i in \$(seq -w $RECORDS); do
      printf '{\"version\":1,\"name\":\"b%s\",\"path\":\"/root/b%s\",\"created_at\":\"2026-11-30T00:00:00Z\",\"pinned_node\":null,\"memory_max\":null,\"nix\":false,\"lease\":null,\"last_snapshot\":null}' \$i \$i > b\$i.json
    done
    ls | xargs -P 16 -I{} sh -c 'curl -sf -T {} http://10.200.0.1:5001/$BUCKET/boxes/\$(basename {} .json)/meta.json >/dev/null'"
# median seconds of RUNS runs of an ag-box command against an endpoint (after PREP, untimed)
median() {
  on "for r in \$(seq $RUNS); do ${3:-true}; s=\$(date +%s.%N); BOX_BUCKET=$BUCKET BOX_S3_ENDPOINT=$1 $2 >/dev/null 2>&1 || exit 1
        e=\$(date +%s.%N); echo \"\$e - \$s\" | bc; done" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}
count=$(on "BOX_BUCKET=$BUCKET ag-box ls --json | grep -c '\"name\"'")
[ "$count" = "$RECORDS" ] || { echo "bench/store.sh: ls shows $count records, expected $RECORDS" >&2; exit 1; }
row() { # LABEL ENDPOINT [PREP]
  local ls st
  ls=$(median "$2" "ag-box ls" "${3:-}"); st=$(median "$2" "ag-box status" "${3:-}")
  printf '%-36s %8.3f s %8.3f s %7.2f\n' "$1" "$ls" "$st" "$(echo "$st / $ls" | bc -l)"
}
printf '%-36s %10s %10s %7s\n' "$RECORDS records, median of $RUNS (nodeB)" "ls" "status" "ratio"
COLD="rm -rf /var/lib/ag-box/record-cache"
row "loopback store" http://10.200.0.1:5001
row "loopback, no record cache" http://10.200.0.1:5001 "$COLD"
on "curl -sf -X POST -d '{\"ms\": 25}' http://10.200.0.1:5002/__latency >/dev/null"
row "50 ms away (25 ms each way)" http://10.200.0.1:5002
row "50 ms away, no record cache" http://10.200.0.1:5002 "$COLD"
on "curl -sf -X POST -d '{\"ms\": 0}' http://10.200.0.1:5002/__latency >/dev/null"
