#!/bin/bash
# bench/restore-ways.sh [FILES] -- what each way of bringing an old copy to a new snapshot costs
# restic itself, on this machine (no rig: a local repository under /srv), for the planner of
# `up` (plan/up.rs `ways`): the reference project of FILES files (default 20,000) backed up,
# 1% of it changed and backed up again, then from a copy equal to the first snapshot:
#  - whole:     restore the second snapshot into an empty dir (then a swap, not timed: renames)
#  - listed:    restic diff of the two snapshots and restic ls of the second (what ag-box runs
#               to learn what changed when nothing was published), then restore of just those
#  - in place:  restore --overwrite if-changed --delete over the copy (restic 0.17+)
#  - published: restore of a snapshot of just the changed files (what a park published)
# Prints each way's seconds and the figures per file and per MiB the planner's model uses.
set -euo pipefail
trap 'echo "bench/restore-ways.sh: failed at line $LINENO" >&2' ERR
cd "$(dirname "$0")/.."
FILES=${1:-20000}
[[ "$FILES" =~ ^[0-9]+$ ]] && [ "$FILES" -ge 1000 ] ||
  { echo "bench/restore-ways.sh: FILES must be a number of files, at least 1000 (got '$FILES')" >&2; exit 2; }
RESTIC=${RESTIC:-/opt/restic-trixie/usr/bin/restic}
[ -x "$RESTIC" ] || { echo "bench/restore-ways.sh: no restic 0.17+ at $RESTIC (tests/rig.sh install puts one there)" >&2; exit 1; }
W=$(mktemp -d /srv/restore-ways.XXXXXX)
trap 'rm -rf "$W"' EXIT
export RESTIC_REPOSITORY=$W/repo RESTIC_PASSWORD=bench RESTIC_CACHE_DIR=$W/cache
r() { "$RESTIC" -q "$@"; }
secs() { # secs CMD... -> seconds the command took
  local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); echo "$e - $s" | bc
}
id_of() { r snapshots --json --tag "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])'; }

P=$W/p
python3 bench/reference-project.py make "$P" "$W/s" 7 "$FILES"
r init
r backup --tag one "$P" >/dev/null
one=$(id_of one)
python3 bench/reference-project.py change "$P" "$W/s" 7 "$FILES"
r backup --tag two --parent "$one" "$P" >/dev/null
two=$(id_of two)
files=$(find "$P" -type f | wc -l)
mib=$(du -sm --apparent-size "$P" | cut -f1)
# Not quiet: -q silences diff and ls.
"$RESTIC" diff --json "$one" "$two" | python3 -c '
import json, sys
out = []
for line in sys.stdin:
    m = json.loads(line)
    if m.get("message_type") == "change" and m["modifier"] in "+M" and not m["path"].endswith("/"):
        out.append(m["path"])
sys.stdout.write("".join(p + "\0" for p in out))' > "$W/changed"
changed=$(tr -cd '\0' < "$W/changed" | wc -c)
changed_mib=$(xargs -0 du -cm --apparent-size < "$W/changed" | tail -1 | cut -f1)
r backup --tag changes --files-from-raw "$W/changed" >/dev/null
changes=$(id_of changes)
# As ag-box restores in place (plan::restic::restore_in_place_args): the copy, equal to one.
in_place() { r restore "$1:$P" --target "$P" --overwrite if-changed --delete --sparse --exclude .ag-box-restore; }
in_place "$one" >/dev/null

whole=$(secs r restore "$two" --target "$W/whole")
rm -rf "$W/whole"
listed=$(secs sh -c "'$RESTIC' diff --json '$one' '$two' >/dev/null && '$RESTIC' ls --json '$two' >/dev/null")
fetch=$(secs r restore "$two" --target "$W/fetch" $(tr '\0' '\n' < "$W/changed" | head -1000 | sed 's/^/--include=/'))
rm -rf "$W/fetch"
published=$(secs r restore "$changes" --target "$W/pub")
rm -rf "$W/pub"
in_place=$(secs in_place "$two")

per_kfile() { printf '%.1f' "$(echo "$1 * 1000000 / $2" | bc -l)"; }  # ms per 1000 files
per_mib() { printf '%.1f' "$(echo "$1 * 1000 / $2" | bc -l)"; }        # ms per MiB
printf '%s files, %s MiB; %s changed (%s MiB); restic %s\n' "$files" "$mib" "$changed" "$changed_mib" \
  "$("$RESTIC" version | cut -d' ' -f2)"
printf '%-12s %8s %14s %14s\n' way seconds "ms/1000 files" "ms/MiB moved"
printf '%-12s %8.2f %14s %14s\n' whole "$whole" "$(per_kfile "$whole" "$files")" "$(per_mib "$whole" "$mib")"
printf '%-12s %8.2f %14s %14s\n' listed "$listed" "$(per_kfile "$listed" "$files")" -
printf '%-12s %8.2f %14s %14s\n' "fetch<=1000" "$fetch" - -
printf '%-12s %8.2f %14s %14s\n' in-place "$in_place" "$(per_kfile "$in_place" "$files")" -
printf '%-12s %8.2f %14s %14s\n' published "$published" - "$(per_mib "$published" "$changed_mib")"
