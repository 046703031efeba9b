#!/bin/bash
# install.sh -- install ag-box on this machine, or on another one over ssh (root).
#
#   install.sh              installs here: /opt/box/bin/ag-box (+ symlink /usr/local/bin/ag-box),
#                           /etc/box/tmux-inner.conf, /etc/box/egress-allow.txt (kept when the
#                           node has one: the shipped copy goes beside it as .dist), /etc/base-flake/, /opt/box/{exclude.txt,
#                           env.example,nodes.example}, completions for bash, zsh and fish, man
#                           pages in /usr/local/share/man/man1, the box-snapshot (every 5 min, each box as
#                           BOX_SNAPSHOT_EVERY says), box-globals (hourly) and box-prune (daily) units and timers when systemd is PID 1, and sysctl
#                           dev.tty.legacy_tiocsti=0; on Debian it apt-gets the tools ag-box runs
#                           (bwrap restic tmux ssh ip unshare, and bash-completion, which loads the
#                           completion in bash) and fails naming any tool that is still missing.
#   install.sh --to ALIAS   finds or builds the binary here, copies a bundle (the binary, this
#                           script and the files above, SHA256SUMS) to the ssh host ALIAS (root
#                           there), runs install.sh there, removes the bundle and checks that
#                           `ag-box --version` there equals this binary's.
#
# The binary: bin/ag-box next to this script (an unpacked bundle), else `cargo build --release
# --locked` in the source tree (target/release/ag-box as it is when there is no cargo). With
# SHA256SUMS next to this script (a bundle) nothing is installed unless bin/ag-box matches it. Idempotent. Progress on stderr; an error is one line
# "install.sh: error: ..." and exit 1 (2 for a usage error).
set -euo pipefail

PROG=install.sh
FILES=(tmux-inner.conf egress-allow.txt exclude.txt env.example nodes.example systemd base-flake)
UNITS=(box-snapshot.service box-snapshot.timer box-globals.service box-globals.timer box-prune.service box-prune.timer)
TIMERS=(box-snapshot.timer box-globals.timer box-prune.timer)
TOOLS=(bwrap restic tmux ssh ip unshare)
declare -A PKG=([bwrap]=bubblewrap [restic]=restic [tmux]=tmux [ssh]=openssh-client [ip]=iproute2 [unshare]=util-linux)
SYSCTL_CONF=/etc/sysctl.d/90-ag-box.conf

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
warn() { printf '%s: warning: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
usage_error() { printf '%s: error: %s (usage: install.sh [--to <ssh-alias>])\n' "$PROG" "$*" >&2; exit 2; }

to=
to_set=0
while [ $# -gt 0 ]; do
  case $1 in
    --to)   [ $# -ge 2 ] || usage_error "--to needs an ssh alias"; to=$2; to_set=1; shift 2 ;;
    --to=*) to=${1#--to=}; to_set=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
if [ $to_set = 1 ]; then
  [ -n "$to" ] || usage_error "--to needs an ssh alias"
  case $to in -*) usage_error "ssh alias '$to' starts with '-'" ;; esac
fi

cd "$(dirname "${BASH_SOURCE[0]}")"

# A bundle carries SHA256SUMS: refuse a damaged binary before touching anything.
verify_bundle() {
  [ -e SHA256SUMS ] || return 0
  command -v sha256sum >/dev/null || die "sha256sum not found: cannot check $PWD/SHA256SUMS (apt-get install coreutils)"
  sha256sum --status -c SHA256SUMS 2>/dev/null ||
    die "checksum mismatch: $PWD/bin/ag-box does not match $PWD/SHA256SUMS (damaged bundle); nothing installed, run install.sh --to again"
  log "bundle checksum ok ($PWD/SHA256SUMS)"
}

# Sets BIN (absolute path) and VERSION (its --version).
find_binary() {
  if [ -e bin/ag-box ]; then
    BIN=$PWD/bin/ag-box
  elif [ -e target/release/ag-box ] && ! command -v cargo >/dev/null; then
    BIN=$PWD/target/release/ag-box
  else
    # In a source tree, always (re)build: cargo is quick when nothing changed, and a stale binary is not.
    [ -f Cargo.toml ] || die "no bin/ag-box or target/release/ag-box in $PWD and no Cargo.toml to build one"
    command -v cargo >/dev/null ||
      die "cargo not found: cannot build ag-box (install Rust from https://rustup.rs, or put a built binary at $PWD/bin/ag-box)"
    log "building ag-box: cargo build --release --locked"
    cargo build --release --locked >&2 || die "cargo build --release --locked failed in $PWD"
    BIN=$PWD/target/release/ag-box
  fi
  [ -x "$BIN" ] || die "$BIN is not executable"
  VERSION=$("$BIN" --version 2>/dev/null) || die "$BIN --version failed (a binary built for another architecture?)"
  log "binary: $BIN ($VERSION)"
}

check_files() {
  local f
  for f in "${FILES[@]}"; do
    [ -e "$f" ] || die "$PWD/$f is missing: run install.sh from the source tree or an unpacked bundle"
  done
  for f in "${UNITS[@]}"; do [ -f "systemd/$f" ] || die "$PWD/systemd/$f is missing"; done
}

# ------------------------------------------------------------------------------------------------
# --to ALIAS: ship a bundle, install it there, compare versions.
STAGE=
ship() {
  local alias=$1 out remote rversion t
  for t in ssh tar sha256sum; do command -v "$t" >/dev/null || die "$t not found (needed by --to)"; done
  check_files
  find_binary
  STAGE=$(mktemp -d "${TMPDIR:-/tmp}/ag-box-bundle.XXXXXX")
  trap 'rm -rf "$STAGE"' EXIT
  cp -R install.sh "${FILES[@]}" "$STAGE/"
  install -D -m 755 "$BIN" "$STAGE/bin/ag-box"
  (cd "$STAGE" && sha256sum bin/ag-box > SHA256SUMS)
  log "$alias: copying the bundle ($(du -sh "$STAGE" | cut -f1)) over ssh"
  # The remote side runs under the alias' login shell: plain POSIX sh.
  out=$(tar -C "$STAGE" -czf - . | ssh "$alias" \
    'd=$(mktemp -d "${TMPDIR:-/tmp}/ag-box-install.XXXXXX") && { tar -xzf - --no-same-owner -C "$d" && echo "$d" || { rm -rf "$d"; exit 1; }; }') ||
    die "copying the bundle to '$alias' over ssh failed (see above; is '$alias' a working ssh alias for root?)"
  remote=${out##*$'\n'}
  [[ $remote =~ ^/[A-Za-z0-9._/-]+/ag-box-install\.[A-Za-z0-9]+$ ]] ||
    die "unexpected reply from '$alias' while copying the bundle: '$remote'"
  log "$alias: checking and installing the bundle in $remote"
  ssh "$alias" "cd $remote && bash ./install.sh; rc=\$?; rm -rf $remote; exit \$rc" < /dev/null >&2 ||
    die "installing on '$alias' failed (its error is above); the bundle $remote was removed"
  log "$alias: removed $remote"
  rversion=$(ssh "$alias" 'ag-box --version' < /dev/null) ||
    die "'ag-box --version' failed on '$alias': is /usr/local/bin on the PATH of non-interactive ssh there?"
  rversion=${rversion##*$'\n'}
  [ "$rversion" = "$VERSION" ] || die "'$alias' runs '$rversion' after the install, expected '$VERSION'"
  log "$alias: $rversion installed"
}

# ------------------------------------------------------------------------------------------------
# Local install.
apt_missing_tools() { # the convenience on Debian: fetch what is missing, the final check decides
  local t pkgs=()
  for t in "${TOOLS[@]}"; do command -v "$t" >/dev/null || pkgs+=("${PKG[$t]}"); done
  [ ${#pkgs[@]} -gt 0 ] && command -v apt-get >/dev/null || return 0
  log "installing ${pkgs[*]} (apt-get)"
  { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null; } ||
    warn "apt-get install ${pkgs[*]} failed"
}

# An interactive bash loads the installed completion through the bash-completion package.
apt_bash_completion() {
  [ -e /usr/share/bash-completion/bash_completion ] && return 0
  if command -v apt-get >/dev/null; then
    log "installing bash-completion (apt-get), which loads ag-box's completion in bash"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q bash-completion >/dev/null ||
      warn "apt-get install bash-completion failed; until it is there, add 'source /usr/share/bash-completion/completions/ag-box' to ~/.bashrc"
  else
    warn "no bash-completion here: add 'source /usr/share/bash-completion/completions/ag-box' to ~/.bashrc to complete ag-box in bash"
  fi
}

install_files() {
  # Copy, then rename: a running box keeps its old file and nobody sees a half-written one.
  install -d -m 755 /opt/box/bin /usr/local/bin
  install -m 755 "$BIN" /opt/box/bin/.ag-box.new
  mv -f /opt/box/bin/.ag-box.new /opt/box/bin/ag-box
  ln -sfn /opt/box/bin/ag-box /usr/local/bin/ag-box
  install -D -m 644 tmux-inner.conf /etc/box/tmux-inner.conf
  # The node's allow-list is the operator's to edit: never overwritten.
  if [ ! -e /etc/box/egress-allow.txt ]; then
    install -m 644 egress-allow.txt /etc/box/egress-allow.txt
  elif ! cmp -s egress-allow.txt /etc/box/egress-allow.txt; then
    install -m 644 egress-allow.txt /etc/box/egress-allow.txt.dist
    warn "kept this node's /etc/box/egress-allow.txt; the shipped list is /etc/box/egress-allow.txt.dist (compare them)"
  fi
  local f
  for f in exclude.txt env.example nodes.example; do install -D -m 644 "$f" "/opt/box/$f"; done
  # Shipped files overwrite theirs; anything else there (the flake.lock nix wrote) stays.
  install -d -m 755 /etc/base-flake
  cp -R base-flake/. /etc/base-flake/
  chmod -R u=rwX,go=rX /etc/base-flake
  install -d -m 700 "${BOX_CONFIG_DIR:-${HOME:-/root}/.config/box}"
  # Completion scripts ask the binary back on every <Tab> (box names come from the store);
  # they and the man pages come from the binary's own definitions, so they match it.
  install -d -m 755 /usr/share/bash-completion/completions /usr/share/zsh/vendor-completions \
    /usr/share/fish/vendor_completions.d /usr/local/share/man/man1
  COMPLETE=bash /opt/box/bin/ag-box > /usr/share/bash-completion/completions/ag-box
  COMPLETE=zsh /opt/box/bin/ag-box > /usr/share/zsh/vendor-completions/_ag-box
  COMPLETE=fish /opt/box/bin/ag-box > /usr/share/fish/vendor_completions.d/ag-box.fish
  /opt/box/bin/ag-box __man /usr/local/share/man/man1
  log "installed /opt/box/bin/ag-box (+ /usr/local/bin/ag-box), /etc/box/{tmux-inner.conf,egress-allow.txt}, /etc/base-flake, /opt/box/{exclude.txt,env.example,nodes.example}, shell completions (bash, zsh, fish), man pages (man ag-box)"
}

install_units() {
  if [ ! -d /run/systemd/system ]; then
    warn "systemd is not PID 1 here: box-snapshot/box-prune timers not installed (no timed snapshots; schedule 'ag-box snapshot --active' yourself)"
    return 0
  fi
  local u
  for u in "${UNITS[@]}"; do install -m 644 "systemd/$u" "/etc/systemd/system/$u"; done
  systemctl daemon-reload || die "systemctl daemon-reload failed"
  systemctl enable --quiet --now "${TIMERS[@]}" || die "systemctl enable --now ${TIMERS[*]} failed"
  log "enabled ${TIMERS[*]} (units in /etc/systemd/system)"
}

# No TIOCSTI: a process sharing a terminal (a box's, say) cannot push keystrokes into it.
apply_sysctl() {
  local out= key=/proc/sys/dev/tty/legacy_tiocsti
  install -d -m 755 /etc/sysctl.d
  printf '%s\n' '# ag-box (install.sh): forbid TIOCSTI keystroke injection into a shared terminal.' \
    'dev.tty.legacy_tiocsti = 0' > "$SYSCTL_CONF"
  if [ ! -e $key ]; then
    warn "this kernel has no dev.tty.legacy_tiocsti (Linux >= 6.2 has): $SYSCTL_CONF written, nothing applied"
  elif ! command -v sysctl >/dev/null; then
    warn "sysctl not found (apt-get install procps): dev.tty.legacy_tiocsti=0 applies at the next boot"
  else
    out=$(sysctl -q -p "$SYSCTL_CONF" 2>&1) || true
    if [ "$(cat $key 2>/dev/null)" != 0 ]; then
      out=${out%%$'\n'*}
      warn "could not set dev.tty.legacy_tiocsti=0 now${out:+ ($out)}; $SYSCTL_CONF applies at the next boot"
    else
      log "dev.tty.legacy_tiocsti = 0 ($SYSCTL_CONF)"
    fi
  fi
}

check_tools() {
  local t missing=()
  for t in "${TOOLS[@]}"; do
    command -v "$t" >/dev/null || missing+=("$t (apt package ${PKG[$t]})")
  done
  [ ${#missing[@]} -eq 0 ] || die "not on PATH: $(IFS=,; echo "${missing[*]}" | sed 's/,/, /g'); install and run install.sh again"
}

verify_bundle
if [ $to_set = 1 ]; then
  ship "$to"
  exit 0
fi
[ "$(id -u)" = 0 ] || die "run as root"
check_files
find_binary
apt_missing_tools
apt_bash_completion
install_files
install_units
apply_sysctl
check_tools
log "installed $(/opt/box/bin/ag-box --version) to /opt/box/bin"
