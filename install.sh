#!/bin/bash
# install.sh -- build and install ag-box on this machine (root).
#   /opt/box/bin/ag-box (+ /usr/local/bin/ag-box), /etc/box/tmux-inner.conf,
#   /opt/box/{exclude.txt,env.example,nodes.example}; on Debian, the packages it runs.
set -euo pipefail
cd "$(dirname "$0")"
die() { printf 'install.sh: error: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root"

missing=()
for tool in bwrap tmux restic; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ] && command -v apt-get >/dev/null; then
  declare -A pkg=([bwrap]=bubblewrap [tmux]=tmux [restic]=restic)
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q $(for t in "${missing[@]}"; do echo "${pkg[$t]}"; done) >/dev/null
fi
for tool in bwrap tmux restic; do
  command -v "$tool" >/dev/null || die "$tool is not installed (hint: apt-get install bubblewrap tmux restic)"
done

cargo build --release --locked
install -D -m 755 target/release/ag-box /opt/box/bin/ag-box
ln -sf /opt/box/bin/ag-box /usr/local/bin/ag-box
install -D -m 644 tmux-inner.conf /etc/box/tmux-inner.conf
for f in exclude.txt env.example nodes.example; do install -D -m 644 "$f" "/opt/box/$f"; done
install -d -m 700 "${BOX_CONFIG_DIR:-$HOME/.config/box}"
echo "installed $(/opt/box/bin/ag-box --version) to /opt/box/bin" >&2
