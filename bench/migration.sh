#!/bin/bash
# bench/migration.sh [FILES] -- one park-on-A / up-on-B migration of a project of FILES files
# (default 3000) through the rig's S3 server, next to plain `restic backup` + `restic restore` of
# the same paths into a repository of their own in the same bucket. Prints seconds per step.
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${1:-3000}
cargo build --release -q
trap 'tests/rig.sh down' EXIT
tests/rig.sh up
for n in nodeA nodeB; do install -m 755 target/release/ag-box "$(tests/rig.sh dir $n)/opt-box/bin/ag-box"; done
on() { local n=$1; shift; tests/rig.sh exec "$n" bash -c "$*"; }
t() { # t NODE SCRIPT -> seconds
  local s e; s=$(date +%s.%N); on "$1" "$2" >/dev/null 2>&1 || { echo "step failed on $1: $2" >&2; exit 1; }
  e=$(date +%s.%N); printf '%.2f' "$(echo "$e - $s" | bc)"
}
on nodeA "ag-box init >/dev/null
  mkdir -p /root/mig/src /root/.claude/projects/-root-mig && cd /root/mig/src &&
  for i in \$(seq $FILES); do head -c \$(( (i % 8 + 1) * 1024 )) /dev/urandom | base64 > f\$i.txt; done
  echo '{}' > /root/.claude/projects/-root-mig/s.jsonl"
change="for i in \$(seq 1 100 $FILES); do echo changed >> /root/mig/src/f\$i.txt; done"
size=$(on nodeA 'du -sh /root/mig | cut -f1')
plain="export RESTIC_REPOSITORY=s3:http://10.200.0.1:5001/agent-boxes/plain RESTIC_PASSWORD=rig-password AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test"
paths="/root/mig /root/.claude/projects/-root-mig"

track=$(t nodeA "ag-box track mig")
on nodeA "ag-box up mig --node nodeA >/dev/null 2>&1; $change"
park=$(t nodeA "ag-box park mig")
up_b=$(t nodeB "ag-box up mig --node nodeB")
on nodeB "test \$(ls /root/mig/src | wc -l) = $FILES"

on nodeA "$plain; restic init -q"
full=$(t nodeA "$plain; restic backup -q --host plain $paths")
on nodeA "$change"
incr=$(t nodeA "$plain; restic backup -q --host plain $paths")
restore=$(t nodeB "$plain; restic restore latest --host plain --target /root/plain-restore")

printf 'project: %s files, %s\n' "$FILES" "$size"
printf '%-44s %8s\n' step seconds
printf '%-44s %8s\n' "ag-box track (first, full snapshot)" "$track" \
  "ag-box park on A (incremental snapshot, stop)" "$park" \
  "ag-box up on B (restore into staging + swap)" "$up_b" \
  "migration total (park A + up B)" "$(echo "$park + $up_b" | bc)" \
  "restic backup, first (full)" "$full" \
  "restic backup, incremental" "$incr" \
  "restic restore on B" "$restore" \
  "plain total (incremental backup + restore)" "$(echo "$incr + $restore" | bc)"
