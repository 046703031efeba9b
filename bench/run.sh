#!/bin/bash
# bench/run.sh [FILES] -- the benchmark table, one run on the rig (root): each row gives
# ag-box's seconds, the reference's and their ratio, and ag-box's peak memory where it moves a
# box.
#  - The reference project (bench/reference-project.py: by default 20,000 files, 300 MB, 50 MB
#    of agent sessions; FILES=200000 makes a 2 GB tree of a JavaScript project's size) migrated
#    nodeA -> nodeB (park + up) beside plain restic (an incremental backup and a restore of the
#    same paths into a repository of their own) and beside rsync over ssh.
#  - The second migration, after a 1% change, to a node holding its older copy (only what the
#    parking node published as changed is fetched), beside rsync of the delta: three rounds
#    (B -> A, A -> B, B -> A), each on a row of its own, and their medians against the goals
#    (this VM's disk makes single runs vary by a third); re-`up` on a node whose copy is current.
#  - Each park is quick (docs/design.md "Quick park"): the whole snapshot that follows it on the
#    parking node is timed on a row of its own, and the next step waits for it (on machines of
#    their own, the other node's steps would not share its cores).
#  - At the default size only: `ls` and `status` with 200 records (bench/store.sh) and
#    `snapshot --active` of 10 boxes against the largest alone, on a loopback store and on one
#    50 ms away (bench/snapshot-active.sh).
# Each ag-box step runs with -v; its timed lines are kept in bench/last-run/ (where time goes).
# Both nodes run Debian 13's restic here (as installed by tests/rig.sh install), so every
# migration uses the same restic. Peak memory is reported for the first round of the second.
set -euo pipefail
trap 'echo "bench/run.sh: failed at line $LINENO" >&2' ERR
cd "$(dirname "$0")/.."
FILES=${1:-20000}
[[ "$FILES" =~ ^[0-9]+$ ]] && [ "$FILES" -ge 1000 ] ||
  { echo "bench/run.sh: FILES must be a number of files, at least 1000 (got '$FILES')" >&2; exit 2; }
logs=bench/last-run
rm -rf "$logs" && mkdir -p "$logs"
command -v rsync >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q rsync >/dev/null
tests/rig.sh install
cargo build --release -q
rows=$(mktemp)
trap 'tests/rig.sh down; rm -f "$rows"' EXIT
tests/rig.sh up nodeA nodeB
for n in nodeA nodeB; do
  d=$(tests/rig.sh dir $n)
  install -m 755 target/release/ag-box "$d/opt-box/bin/ag-box"
  install -m 755 /opt/restic-trixie/usr/bin/restic "$d/opt-box/bin/restic"
  install -m 755 bench/reference-project.py "$d/root/reference-project.py"
done
on() { local n=$1; shift; tests/rig.sh exec "$n" bash -c "$*"; }
t() { # t NODE SCRIPT -> seconds
  local s e; s=$(date +%s.%N); on "$1" "$2" >/dev/null 2>&1 || { echo "bench/run.sh: step failed on $1: $2" >&2; exit 1; }
  e=$(date +%s.%N); echo "$e - $s" | bc
}
agbox() { # agbox LABEL NODE ARGS -> seconds; its -v lines (where time goes) in $logs/LABEL.log
  local s e; s=$(date +%s.%N)
  on "$2" "ag-box -v $3" >"$logs/$1.log" 2>&1 ||
    { echo "bench/run.sh: step failed on $2: ag-box $3 (see $logs/$1.log)" >&2; exit 1; }
  e=$(date +%s.%N)
  echo "$e - $s" | bc
}
finished() { # finished LABEL NODE -> seconds until the whole snapshot a quick park leaves to
  # follow is in (its unit's log in $logs/LABEL.log); the next step waits for it, as another
  # machine would not share these cores with it
  local s e; s=$(date +%s.%N)
  # (a start still queued is no job done: inactive, with a job)
  on "$2" "for i in \$(seq 1200); do [ -n \"\$(systemctl show -p Job --value boxfinish-ref)\" ] ||
    systemctl is-active -q boxfinish-ref || exit 0; sleep 0.05; done; exit 1" ||
    { echo "bench/run.sh: the whole snapshot after the park on $2 never ended" >&2; exit 1; }
  e=$(date +%s.%N)
  on "$2" "journalctl -q -u boxfinish-ref --no-pager" >"$logs/$1.log" 2>&1 || true
  echo "$e - $s" | bc
}
mib() { # mib LABEL [FIELD] -> ag-box's peak memory in MiB (FIELD 2: restic's), from its last line
  sed -n 's/.*peak memory: \([0-9]*\) MiB in ag-box, \([0-9]*\) MiB.*/\1 \2/p' "$logs/$1.log" |
    cut -d' ' -f"${2:-1}"
}
row() { # row CASE AGBOX_S REFERENCE REFERENCE_S
  local ratio=-; [ -z "$4" ] || ratio=$(printf '%.2f' "$(echo "$2 / $4" | bc -l)")
  printf '%-52s %8.2f  %-44s %8s %6s\n' "$1" "$2" "${3:--}" "${4:+$(printf '%.2f' "$4")}" "$ratio" >> "$rows"
}

SESS=/root/.claude/projects/-root-ref
HOME_SESS=/var/lib/ag-box/homes/ref/.claude/projects/-root-ref
gen() { # gen NODE VERB PROJECT SESSIONS [SEED]
  on "$1" "python3 /root/reference-project.py $2 $3 $4 ${5:-7} $FILES"
}
gen nodeA make /root/ref $SESS
on nodeA "ag-box init >/dev/null 2>&1"
size=$(on nodeA "du -sh /root/ref | cut -f1; find /root/ref -type f | wc -l; du -sh $SESS | cut -f1" | paste -sd' ')
on nodeA "ag-box track ref >/dev/null 2>&1 && ag-box up ref --node nodeA >/dev/null 2>&1"
# nodeB has used the repository before (its own restic key is made on a node's first use).
on nodeB "ag-box init >/dev/null 2>&1"

# First migration: A -> B, B holding nothing, after a 1% change on A (plain restic's
# incremental backup reads the same change).
plain="export RESTIC_REPOSITORY=s3:http://10.200.0.1:5001/agent-boxes/plain RESTIC_PASSWORD=rig-password AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test"
on nodeA "$plain; restic init -q && restic backup -q --host plain /root/ref $SESS"
gen nodeA change /root/ref $HOME_SESS 1 && gen nodeA change /root/ref $SESS 1
# This VM's ext4 has no journal: for 60 s after an inode is freed (360 s while its table is
# unwritten) the kernel skips it on every allocation, and files made just after a rig's cleanup
# removed hundreds of thousands cost several times what they do later. Each of the three
# restores below creates as many files; none may be the one that pays for that.
sync && sleep 61
park1=$(agbox park1 nodeA "park ref")
finish1=$(finished finish1 nodeA)
incr=$(t nodeA "$plain; restic backup -q --host plain /root/ref $SESS")
# Each restore starts with nothing of the last one's left to write out (one kernel for all).
on nodeB sync
up1=$(agbox up1 nodeB "up ref --node nodeB")
on nodeB sync
restore=$(t nodeB "$plain; restic restore -q latest --host plain --target /root/plain-restore")
on nodeB sync
rsync1=$(t nodeB "mkdir -p /root/rsync-copy && rsync -a --delete nodeA:/root/ref nodeA:$SESS /root/rsync-copy/")
row "first migration: park on A (1% changed)" "$park1" "restic backup, incremental (goal <= 1.3)" "$incr"
row "first migration: up on B (restore)" "$up1" "restic restore" "$restore"
row "  whole snapshot after the park, beside (on A)" "$finish1" "restic backup, incremental" "$incr"
row "first migration: park + up" "$(echo "$park1 + $up1" | bc)" "restic backup + restore" "$(echo "$incr + $restore" | bc)"
row "first migration: park + up" "$(echo "$park1 + $up1" | bc)" "rsync over ssh, all (goal <= 1.0)" "$rsync1"

# Second migration: FROM -> TO after a 1% change, TO holding its older copy (and so does
# rsync's, brought to it locally first), three times.
second() { # second ROUND FROM TO SEED: appends to parks2 finishes2 ups2 rsyncs2
  local round=$1 from=$2 to=$3
  on "$to" "mkdir -p /root/rsync-copy/ref /root/rsync-copy/-root-ref &&
    rsync -a --delete /root/ref/ /root/rsync-copy/ref/ && rsync -a --delete $HOME_SESS/ /root/rsync-copy/-root-ref/"
  gen "$from" change /root/ref $HOME_SESS "$4"
  # The copies above written out before the clock starts: their dirty pages would stall the
  # fsyncs of the steps measured next (all nodes share this kernel).
  on "$from" sync
  on "$to" sync
  parks2+=("$(agbox "park2-$round" "$from" "park ref")")
  finishes2+=("$(finished "finish2-$round" "$from")")
  ups2+=("$(agbox "up2-$round" "$to" "up ref --node $to")")
  rsyncs2+=("$(t "$to" "rsync -a --delete $from:/root/ref $from:$HOME_SESS /root/rsync-copy/")")
  on "$to" "diff -rq /root/ref /root/rsync-copy/ref >/dev/null" ||
    { echo "bench/run.sh: the second migration ($from -> $to) and rsync disagree" >&2; exit 1; }
}
median() { printf '%s\n' "$@" | sort -g | sed -n "$(( ($# + 1) / 2 ))p"; }
parks2=() finishes2=() ups2=() rsyncs2=()
second 1 nodeB nodeA 7
second 2 nodeA nodeB 8
second 3 nodeB nodeA 9
sums2=()
for i in 0 1 2; do sums2+=("$(echo "${parks2[i]} + ${ups2[i]}" | bc)"); done
on nodeA "ag-box park ref >/dev/null 2>&1"
finished finish-a nodeA >/dev/null
reup=$(agbox reup nodeA "up ref --node nodeA")
on nodeA "ag-box park ref >/dev/null 2>&1"
finished finish-a nodeA >/dev/null
# Third migration: the same, but what B published is gone (a park cut off before it got to
# publish): A asks restic diff what changed.
on nodeB "ag-box up ref --node nodeB >/dev/null 2>&1"
gen nodeB change /root/ref $HOME_SESS 3
on nodeB "ag-box park ref >/dev/null 2>&1"
finished finish3 nodeB >/dev/null
ip netns exec box-nodeA /opt/moto/bin/python -c "import boto3; boto3.client('s3', endpoint_url='http://10.200.0.1:5001', aws_access_key_id='test', aws_secret_access_key='test', region_name='us-east-1').delete_object(Bucket='agent-boxes', Key='deltas/ref.changes.json')"
up3=$(agbox up3 nodeA "up ref --node nodeA")
on nodeA "ag-box park ref >/dev/null 2>&1"
rounds=("B -> A" "A -> B" "B -> A")
for i in 0 1 2; do
  row "  second migration, round $((i + 1)) (${rounds[i]}): park + up" "${sums2[i]}" "rsync over ssh of the delta" "${rsyncs2[i]}"
done
row "second migration: park (median)" "$(median "${parks2[@]}")" "first migration: park" "$park1"
row "  whole snapshot after the park, beside (median)" "$(median "${finishes2[@]}")" "" ""
row "second migration: up, what was published (median)" "$(median "${ups2[@]}")" "first migration: up (goal <= 0.25)" "$up1"
row "second migration: park + up (median)" "$(median "${sums2[@]}")" "rsync of the delta, median (goal <= 1.5)" "$(median "${rsyncs2[@]}")"
row "third migration: up on A (restic diff)" "$up3" "first migration: up" "$up1"
row "re-up on a node whose copy is current" "$reup" "" ""
for step in park1 up1 park2-1 up2-1 up3; do
  printf '%-52s %8s  %-44s %8s %6s\n' "peak memory of ag-box: $step (MiB)" "$(mib $step)" \
    "goal (restic's own: $(mib $step 2) MiB)" "200" \
    "$(printf '%.2f' "$(echo "$(mib $step) / 200" | bc -l)")" >> "$rows"
done
tests/rig.sh down >/dev/null 2>&1

if [ "$FILES" = 20000 ]; then

# ls / status with 200 records; snapshot --active of 10 boxes. Their own scripts boot the rig.
bench/store.sh 200 5 | awk -v f="$rows" '
  /^loopback store/ { printf "%-52s %8.2f  %-44s %8s %6s\n", "ls, 200 records, loopback store", $3, "goal", "0.15", sprintf("%.2f", $3 / 0.15) >> f
                      printf "%-52s %8.2f  %-44s %8.2f %6.2f\n", "status, 200 records, loopback store", $5, "ls (goal <= 1.5)", $3, $5 / $3 >> f }
  /^50 ms away \(/  { printf "%-52s %8.2f  %-44s %8s %6s\n", "ls, 200 records, store 50 ms away", $8, "goal", "1.50", sprintf("%.2f", $8 / 1.5) >> f
                      printf "%-52s %8.2f  %-44s %8.2f %6.2f\n", "status, 200 records, store 50 ms away", $10, "ls (goal <= 1.5)", $8, $10 / $8 >> f }'
for ms in 0 25; do
  bench/snapshot-active.sh 10 3 "$ms" | awk -v f="$rows" -v where="$([ "$ms" = 0 ] && echo "" || echo ", store 50 ms away")" '
    /^snapshot of the largest box alone/ { alone = $NF }
    /--active of all/   { all = $NF }
    /so at least/       { floor = $NF }
    /met a removed lock/ { stalls = $NF }
    /snapshots at once/ { at_once = $NF }
    /how busy the cores/ { busy = $NF }
    /plain restic backup of the largest/ { p_alone = $NF }
    /plain restic backups of all/ { p_all = $NF }
    END { printf "%-52s %8.2f  %-44s %8.2f %6.2f\n", "snapshot --active, 10 boxes" where, all, "the largest box alone (goal <= 1.5)", alone, all / alone >> f
          printf "%-52s %8.2f  %-44s %8.2f %6.2f\n", "  10 plain restic backups side by side", p_all, "one plain restic backup, the largest box", p_alone, p_all / p_alone >> f
          printf "%-52s %8.2f  %-44s %8.2f %6.2f\n", "  snapshot --active, 10 boxes", all, "10 plain restic backups side by side", p_all, all / p_all >> f
          printf "%-52s %8.2f  %-44s %8.2f %6.2f\n", "  its CPU (ag-box, restic, S3 server) / cores", floor, "the largest box alone", alone, floor / alone >> f
          printf "%-52s %8d  %-44s %8s %6s\n", "  restic lock checks meeting a removed lock (5 s)", stalls, "-", "", "" >> f
          printf "%-52s %8.1f  %-44s %8.2f %6s\n", "  snapshots at once", at_once, "how busy the cores were (wider under 0.75)", busy, "" >> f }'
done
fi

echo "reference project: $size (files, sessions); restic $(/opt/restic-trixie/usr/bin/restic version | cut -d' ' -f2) on both nodes; $(nproc) cores"
printf '%-52s %8s  %-44s %8s %6s\n' case ag-box reference seconds ratio
cat "$rows"
