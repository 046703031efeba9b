#!/bin/bash
# bench/cadence.sh [BOXES] [FILES] -- what the snapshot timer costs a node whose boxes are idle,
# on the rig (root). Boots nodeA with BOXES boxes up (default 50), each FILES small files
# (default 2000) that do not change; each box gets its first snapshot. Then the timer's run,
# `ag-box snapshot --active --due`, is timed twice: with every box due (each is walked and its
# lease renewed: no restic runs, as nothing changed), and with none due (the 5-minute ticks in
# between). Prints the CPU seconds of each run (ag-box and everything it ran; the S3 server's,
# on the same cores, apart) and what a 5- and a 15-minute BOX_SNAPSHOT_EVERY cost in a share of
# one core (goal: under 5% at 5 minutes and 50 boxes).
set -euo pipefail
trap 'echo "bench/cadence.sh: failed at line $LINENO" >&2' ERR
cd "$(dirname "$0")/.."
BOXES=${1:-50}
FILES=${2:-2000}
cargo build --release -q
trap 'tests/rig.sh down' EXIT
tests/rig.sh up nodeA
install -m 755 target/release/ag-box "$(tests/rig.sh dir nodeA)/opt-box/bin/ag-box"
install -m 755 /opt/restic-trixie/usr/bin/restic "$(tests/rig.sh dir nodeA)/opt-box/bin/restic"
on() { tests/rig.sh exec nodeA bash -c "$1"; }
on "ag-box init >/dev/null 2>&1"
for i in $(seq "$BOXES"); do
  on "mkdir -p /srv/idle-$i/src && cd /srv/idle-$i/src && for f in \$(seq $FILES); do echo \$f > f\$f; done
      ag-box track idle-$i /srv/idle-$i >/dev/null 2>&1 && ag-box up idle-$i >/dev/null 2>&1" ||
    { echo "bench/cadence.sh: box idle-$i did not come up" >&2; exit 1; }
done
on "ag-box snapshot --active >/dev/null 2>&1"
moto_pid=$(cat "${BOX_TEST_BASE:-/srv/boxtest}/moto.pid")
s3_cpu() { awk -v t="$(getconf CLK_TCK)" '{ print ($14 + $15) / t }' "/proc/$moto_pid/stat"; }
# run LABEL: one timer run; prints "cpu seconds, wall seconds, S3 server cpu seconds"
run() {
  local m; m=$(s3_cpu)
  on "/usr/bin/time -f '%U %S %e' -o /tmp/cadence.cpu ag-box snapshot --active --due >/tmp/cadence-$1.log 2>&1" ||
    { echo "bench/cadence.sh: the $1 run failed:" >&2; on "cat /tmp/cadence-$1.log" >&2; exit 1; }
  local t; t=$(on "cat /tmp/cadence.cpu")
  echo "$(echo "$t" | awk '{ print $1 + $2 }') $(echo "$t" | awk '{ print $3 }') $(echo "$(s3_cpu) - $m" | bc)"
}
on "touch -d '20 minutes ago' /var/lib/ag-box/local/snapshot-turns/*"
read -r due_cpu due_wall due_s3 < <(run due)
taken=$(on "grep -c ' unchanged\$' /tmp/cadence-due.log || true")
read -r idle_cpu idle_wall idle_s3 < <(run idle)
skipped=$(on "grep -c 'no active box is due' /tmp/cadence-idle.log || true")
share5=$(echo "scale=2; 100 * $due_cpu / 300" | bc)
share15=$(echo "scale=2; 100 * ($due_cpu + 2 * $idle_cpu) / 900" | bc)
printf '%-58s %10s %10s %10s\n' "run of the snapshot timer, $BOXES idle boxes of $FILES files" "cpu s" "wall s" "S3 cpu s"
printf '%-58s %10s %10s %10s\n' "every box due ($taken of $BOXES unchanged: no restic run)" "$due_cpu" "$due_wall" "$due_s3"
printf '%-58s %10s %10s %10s\n' "none due (the ticks between; said so: $skipped)" "$idle_cpu" "$idle_wall" "$idle_s3"
printf '%-58s %10s\n' "BOX_SNAPSHOT_EVERY=5m: share of one core (goal < 5%)" "$share5%"
printf '%-58s %10s\n' "BOX_SNAPSHOT_EVERY=15m (default): share of one core" "$share15%"
