#!/bin/bash
# bench/changes-ways.sh [FILES] -- what moving 1% of a box's files between two nodes costs each
# way there is, on the rig (root), for the choices issue "fast at real project sizes" leaves:
# the reference project of FILES files (default 20,000) on nodeA, an older copy of it on nodeB,
# 1% of it changed on nodeA; then
#  - restic, as a park and an up do today: a backup of just the changed files into a
#    repository that holds the whole tree (restic loads that repository's index first), and
#    its restore into a staging dir on nodeB;
#  - the same into a repository of its own that holds only such changes (a small index);
#  - a copy of just those files from nodeA's copy over ssh (tar), what a peer copy would run;
#  - rsync over ssh of the tree, which finds and sends the same change (the issue's reference).
# `restic ls` of the changes shows what loading each repository's index costs, which every
# backup and restore pays first (here the whole tree's repository holds one box and one
# snapshot of it; a node's repository holds every box and its history).
# ROUNDS (default 3) rounds, each a new 1% change. restic's rows leave out what opening the
# repository alone costs (the same password, so the same key derivation, in both; a node's own
# key makes it cheap under ag-box): what is left is the command's own work.
set -euo pipefail
trap 'echo "bench/changes-ways.sh: failed at line $LINENO" >&2' ERR
cd "$(dirname "$0")/.."
FILES=${1:-20000}
[[ "$FILES" =~ ^[0-9]+$ ]] && [ "$FILES" -ge 1000 ] ||
  { echo "bench/changes-ways.sh: FILES must be a number of files, at least 1000 (got '$FILES')" >&2; exit 2; }
command -v rsync >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q rsync >/dev/null
tests/rig.sh install
trap 'tests/rig.sh down >/dev/null 2>&1' EXIT
tests/rig.sh up nodeA nodeB
for n in nodeA nodeB; do
  d=$(tests/rig.sh dir $n)
  install -m 755 /opt/restic-trixie/usr/bin/restic "$d/opt-box/bin/restic"
  install -m 755 bench/reference-project.py "$d/root/reference-project.py"
done
on() { local n=$1; shift; tests/rig.sh exec "$n" bash -c "$*"; }
repo() { # repo NAME -> the environment restic needs for that repository of the rig's bucket
  echo "export RESTIC_REPOSITORY=s3:http://10.200.0.1:5001/agent-boxes/ways-$1 RESTIC_PASSWORD=bench AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test"
}
t() { # t NODE SCRIPT -> seconds
  local s e; s=$(date +%s.%N)
  on "$1" "$2" >/dev/null 2>&1 || { echo "bench/changes-ways.sh: step failed on $1: $2" >&2; exit 1; }
  e=$(date +%s.%N); echo "$e - $s" | bc
}

on nodeA "python3 /root/reference-project.py make /root/ref /root/sessions 7 $FILES"
for r in whole changes; do on nodeA "$(repo $r); restic init -q"; done
on nodeA "$(repo whole); restic backup -q --host ways /root/ref"
on nodeB "mkdir -p /root/ref && rsync -a nodeA:/root/ref/ /root/ref/ && sync"
rows=$(mktemp)
trap 'tests/rig.sh down >/dev/null 2>&1; rm -f "$rows"' EXIT
ROUNDS=${ROUNDS:-3}
declare -A took
way() { # way KEY SECONDS: one round's figure of a way
  took[$1]="${took[$1]:-} $(printf '%.2f' "$2")"
}
for round in $(seq "$ROUNDS"); do
  on nodeA "touch /root/.before; sleep 0.01
    python3 /root/reference-project.py change /root/ref /root/sessions $((8 + round)) $FILES
    find /root/ref -newer /root/.before -type f -print0 > /root/changed; sync"
  on nodeB "scp -q nodeA:/root/changed /root/changed; sync"
  for r in whole changes; do
    env=$(repo $r)
    open=$(t nodeA "$env; restic cat config --no-lock")
    backup=$(t nodeA "$env; restic backup -q --force --host ways-changes --files-from-raw /root/changed")
    on nodeA sync
    id=$(on nodeA "$env; restic snapshots --no-lock --json --host ways-changes --latest 1" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)[-1]["id"])')
    on nodeB "rm -rf /root/staged; sync"
    restore=$(t nodeB "$env; restic restore -q --no-lock $id --target /root/staged")
    listing=$(t nodeB "$env; restic ls -q --no-lock $id")
    way "$r-open" "$open"
    way "$r-backup" "$(echo "$backup - $open" | bc)"
    way "$r-restore" "$(echo "$restore - $open" | bc)"
    way "$r-index" "$(echo "$listing - $open" | bc)"
  done
  on nodeB "rm -rf /root/staged && mkdir /root/staged && sync"
  way peer "$(t nodeB "ssh nodeA 'tar -C / -cf - --null --verbatim-files-from -T /root/changed' | tar -C /root/staged -xf -")"
  on nodeB "rm -rf /root/staged; sync"
  way rsync "$(t nodeB "rsync -a --delete nodeA:/root/ref/ /root/ref/")"
  on nodeB sync
done
changed=$(on nodeA "tr -cd '\0' < /root/changed | wc -c")
mib=$(on nodeA "xargs -0 du -cm --apparent-size < /root/changed | tail -1 | cut -f1")
row() { printf '%-66s %s\n' "$1" "${took[$2]}" >> "$rows"; }
row "restic backup of the changes, repository holding the whole tree" whole-backup
row "  their restore on nodeB (--no-lock)" whole-restore
row "restic backup of the changes, repository of changes alone" changes-backup
row "  their restore on nodeB (--no-lock)" changes-restore
row "restic ls of the changes (mostly loading the index), whole tree's" whole-index
row "  the same, repository of changes alone" changes-index
row "opening a repository (key derivation, config), not counted above" whole-open
row "the changed files from nodeA's copy over ssh (tar)" peer
row "rsync over ssh of the tree (the reference)" rsync

echo "reference project: $FILES files, $changed changed ($mib MiB); restic $(/opt/restic-trixie/usr/bin/restic version | cut -d' ' -f2); $(nproc) cores"
printf '%-66s %s\n' way "seconds, round by round"
cat "$rows"
