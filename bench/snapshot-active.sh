#!/bin/bash
# bench/snapshot-active.sh [BOXES] [ROUNDS] [MS] -- `ag-box snapshot --active` of BOXES (default 10)
# boxes up on one node against a snapshot of the largest of them alone, on the rig (root). Boots
# nodeA; box i holds i x 4 MB of fresh random files, and each round rewrites a tenth of every box
# first, so every snapshot has new data to read and upload. Prints the mean of ROUNDS (default 3)
# rounds. With MS, the store is reached through the rig's S3 fault proxy adding MS each way (R2
# from a VPS is 20-80 ms away); the proxy is Python on the same cores.
set -euo pipefail
trap 'echo "bench/snapshot-active.sh: failed at line $LINENO" >&2' ERR
cd "$(dirname "$0")/.."
BOXES=${1:-10}
ROUNDS=${2:-3}
MS=${3:-0}
cargo build --release -q
trap 'tests/rig.sh down' EXIT
tests/rig.sh up nodeA
install -m 755 target/release/ag-box "$(tests/rig.sh dir nodeA)/opt-box/bin/ag-box"
# Debian 13's restic, as bench/run.sh uses (before 0.18, restic runs side by side can stall).
install -m 755 /opt/restic-trixie/usr/bin/restic "$(tests/rig.sh dir nodeA)/opt-box/bin/restic"
ENDPOINT=
if [ "$MS" != 0 ]; then
  ENDPOINT="export BOX_S3_ENDPOINT=http://10.200.0.1:5002;"
  tests/rig.sh exec nodeA curl -sf -X POST -d "{\"ms\": $MS}" http://10.200.0.1:5002/__latency >/dev/null
fi
on() { tests/rig.sh exec nodeA bash -c "$ENDPOINT $1"; }
on "ag-box init >/dev/null 2>&1"
for i in $(seq "$BOXES"); do
  on "mkdir -p /srv/snap-$i && cd /srv/snap-$i && for f in \$(seq $((i * 4))); do head -c 1M /dev/urandom > f\$f; done
      ag-box track snap-$i /srv/snap-$i >/dev/null 2>&1 && ag-box up snap-$i >/dev/null 2>&1"
done
# rewrite a tenth of every box's files
churn() { on "for i in \$(seq $BOXES); do cd /srv/snap-\$i; n=\$(ls | wc -l); for f in \$(ls | head -n \$(( (n + 9) / 10 ))); do head -c 1M /dev/urandom > \$f; done; done"; }
timed() { local s e; s=$(date +%s.%N); on "$1" >/dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc; }
# CPU seconds the S3 server (moto, on the same cores) has used so far.
moto_pid=$(cat "${BOX_TEST_BASE:-/srv/boxtest}/moto.pid")
moto_log="${BOX_TEST_BASE:-/srv/boxtest}/moto.log"
# Lock reads the S3 server answered 404: a restic met a lock removed as it checked (restic #1523),
# and waited five seconds.
vanished() { tail -n +"$(($1 + 1))" "$moto_log" | grep -c 'restic/locks/.* 404' || true; }
s3_cpu() { awk -v t="$(getconf CLK_TCK)" '{ print ($14 + $15) / t }' "/proc/$moto_pid/stat"; }
# One run unmeasured first: each run plans how many snapshots run at once by what the run before
# it measured, as the hourly runs do.
churn; on "ag-box snapshot --active" >/dev/null 2>&1
alone=0 all=0 small=0 cpu=0 s3=0 stalls=0 at_once=0 busy=0
for r in $(seq "$ROUNDS"); do
  churn; a=$(timed "ag-box snapshot snap-$BOXES")
  churn; m=$(s3_cpu); lines=$(wc -l < "$moto_log")
  b=$(timed "/usr/bin/time -f '%U %S' -o /tmp/active.cpu ag-box snapshot --active")
  s3=$(echo "$s3 + $(s3_cpu) - $m" | bc)
  v=$(vanished "$lines"); stalls=$((stalls + v))
  echo "round $r: alone $a, --active $b, lock reads that met a removed lock $v" >&2
  cpu=$(echo "$cpu + $(on "awk '{ print \$1 + \$2 }' /tmp/active.cpu")" | bc)
  last=$(on "ag-box status --json" | python3 -c 'import json,sys; r=json.load(sys.stdin)["last_active_run"]; print(r["at_once"], r["cores_busy"])')
  at_once=$(echo "$at_once + ${last% *}" | bc); busy=$(echo "$busy + ${last#* }" | bc -l)
  c=$(timed "ag-box snapshot snap-1")   # nothing new: the fixed cost of one snapshot
  alone=$(echo "$alone + $a" | bc); all=$(echo "$all + $b" | bc); small=$(echo "$small + $c" | bc)
done
# The same churn saved by plain restic backups with the node's key, outside ag-box: the largest
# box alone, then every box side by side. Their ratio is what this store and restic allow ten
# snapshots at once, whatever runs them.
on "set -a; . /root/.config/box/env; set +a; $ENDPOINT
  python3 - /var/lib/ag-box/restic-node-key.json > /root/plain.env <<'PY'
import json, os, shlex, sys
key = json.load(open(sys.argv[1]))
env = {k: os.environ[k] for k in ('AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY')}
env['RESTIC_REPOSITORY'] = 's3:%s/%s/restic' % (os.environ['BOX_S3_ENDPOINT'], os.environ['BOX_BUCKET'])
env['RESTIC_PASSWORD'], env['RESTIC_KEY_HINT'] = key['password'], key['id']
print('\\n'.join('export %s=%s' % (k, shlex.quote(v)) for k, v in env.items()))
PY"
plain=". /root/plain.env; b() { /opt/box/bin/restic backup -q --host plain --tag plain /srv/snap-\$1 >/dev/null; }"
p_alone=0 p_all=0
for r in $(seq "$ROUNDS"); do
  churn; a=$(timed "$plain; b $BOXES")
  churn; b=$(timed "$plain; for i in \$(seq $BOXES); do b \$i & done; wait")
  echo "round $r: plain restic alone $a, side by side $b" >&2
  p_alone=$(echo "$p_alone + $a" | bc); p_all=$(echo "$p_all + $b" | bc)
done
printf '%-52s %8s\n' "case (mean of $ROUNDS, $(nproc) cores, store $((2 * MS)) ms away)" "seconds"
printf '%-52s %8.2f\n' "snapshot of the smallest box, unchanged (fixed cost)" "$(echo "$small / $ROUNDS" | bc -l)"
printf '%-52s %8.2f\n' "snapshot of the largest box alone ($((BOXES * 4)) MB)" "$(echo "$alone / $ROUNDS" | bc -l)"
printf '%-52s %8.2f\n' "snapshot --active of all $BOXES boxes ($((BOXES * (BOXES + 1) * 2)) MB)" "$(echo "$all / $ROUNDS" | bc -l)"
printf '%-52s %8.2f\n' "ratio (goal: at most 1.5)" "$(echo "$all / $alone" | bc -l)"
printf '%-52s %8.2f\n' "plain restic backup of the largest box alone" "$(echo "$p_alone / $ROUNDS" | bc -l)"
printf '%-52s %8.2f\n' "plain restic backups of all $BOXES side by side" "$(echo "$p_all / $ROUNDS" | bc -l)"
printf '%-52s %8.2f\n' "ratio (what this store and restic allow)" "$(echo "$p_all / $p_alone" | bc -l)"
printf '%-52s %8d\n' "  restic lock checks that met a removed lock (5 s)" "$stalls"
printf '%-52s %8.1f\n' "  snapshots at once" "$(echo "$at_once / $ROUNDS" | bc -l)"
printf '%-52s %8.2f\n' "  how busy the cores were (8 per core under 0.75)" "$(echo "$busy / $ROUNDS" | bc -l)"
# What bounds it from below on this machine: the CPU the run needs, spread over every core.
printf '%-52s %8.2f\n' "  CPU of ag-box and restic during --active" "$(echo "$cpu / $ROUNDS" | bc -l)"
printf '%-52s %8.2f\n' "  CPU of the S3 server during --active" "$(echo "$s3 / $ROUNDS" | bc -l)"
printf '%-52s %8.2f\n' "  so at least, on $(nproc) cores" "$(echo "($cpu + $s3) / $ROUNDS / $(nproc)" | bc -l)"
