#!/bin/bash
# bench/box-times.sh [FILES] [ROUNDS] -- wall-clock figures of the box lifecycle on a booted systemd
# rig node (root). Boots nodeA, installs target/release/ag-box there, times track, up without
# restore, ls, park, and up with restore (project and session slice wiped first); prints a table.
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${1:-500}
ROUNDS=${2:-5}
cargo build --release -q
trap 'tests/rig.sh down' EXIT
tests/rig.sh up nodeA
install -m 755 target/release/ag-box "$(tests/rig.sh dir nodeA)/opt-box/bin/ag-box"
# The embedded local store (the rig's default config points at its S3 server).
node() { tests/rig.sh exec nodeA BOX_CONFIG_DIR=/root/.config/box-local bash -c "$1"; }
timed() { # timed LABEL SCRIPT -> "LABEL seconds"
  local s e; s=$(date +%s.%N); node "$2" >/dev/null 2>&1 || { echo "step failed: $2" >&2; exit 1; }
  e=$(date +%s.%N)
  printf '%s %.3f\n' "$1" "$(echo "$e - $s" | bc)"
}
node "mkdir -p /root/bench/src && cd /root/bench/src && for i in \$(seq $FILES); do head -c 4096 /dev/urandom | base64 > f\$i.txt; done
      mkdir -p /root/.claude/projects/-root-bench && echo '{}' > /root/.claude/projects/-root-bench/s.jsonl"
echo "project: $FILES files, $(node 'du -sh /root/bench | cut -f1') (rounds: $ROUNDS)" >&2
{
  timed track "ag-box track bench"
  for r in $(seq "$ROUNDS"); do
    timed "up(no-restore)" "ag-box up bench"
    timed ls "ag-box ls"
    timed park "ag-box park bench"
    node "rm -rf /root/bench /root/.claude/projects/-root-bench"
    timed "up(restore)" "ag-box up bench"
    node "ag-box park bench" >/dev/null 2>&1
  done
} | awk '!($1 in n) { keys[++k] = $1 }
         { n[$1]++; s[$1] += $2; if (!($1 in mn) || $2 < mn[$1]) mn[$1] = $2; if ($2 > mx[$1]) mx[$1] = $2 }
         END { printf "%-16s %5s %8s %8s %8s\n", "step", "runs", "mean_s", "min_s", "max_s";
               for (i = 1; i <= k; i++) { x = keys[i]; printf "%-16s %5d %8.3f %8.3f %8.3f\n", x, n[x], s[x] / n[x], mn[x], mx[x] } }'
