#!/bin/bash
# tests/rig.sh -- the integration-test rig of ag-box: real systemd "nodes" on one Debian 12 host.
#
# Each node is a network namespace (box-<node>) plus systemd-nspawn booting the host's own systemd
# (basic.target + sshd) on a copy-on-write (tmpfs overlay) view of the host's /.  Node-private
# (bind-mounted from $BASE/nodes/<node>/...):
#   /root <- root   /run/box <- run-box   /opt/box <- opt-box   /etc/box <- etc-box
#   /etc/ssh <- etc-ssh   /etc/hostname <- hostname (ro)   /var/lib/ag-box <- var-lib-ag-box
# With several nodes up they share a bridged link (nodeA 10.200.0.1, nodeB .2, nodeC .3, inside our
# own netns only) and root on each can `ssh nodeX` to the others (keys, known_hosts, ~/.ssh/config).
# Put a binary at "$(rig.sh dir nodeA)/opt-box/bin/X" and it is /opt/box/bin/X (on PATH) in the node.
#
# Usage (root; PID 1 of the host need not be systemd):
#   rig.sh install                 apt-get the packages the rig needs, moto, and the pinned agent
#                                  CLIs (npm, into $AGENTS) (quiet, idempotent)
#   rig.sh up [NODE...]            clean any leftovers, boot NODEs (default: all three) until
#                                  systemd is running and sshd active; link them and ssh
#   rig.sh down                    stop every node, delete netns/cgroups/node dirs (never fails)
#   rig.sh exec NODE [K=V...] CMD...   run CMD in NODE with a clean env (exit status of CMD;
#                                  125 if the node is not up)
#   rig.sh leader NODE             print the host PID of the node's PID 1 (systemd)
#   rig.sh dir NODE                print the node's host-side directory
#   rig.sh status                  one line per node
#   rig.sh link-down|link-up NODE  cut / restore NODE's network link (failure tests)
#   rig.sh power-off NODE          cut NODE's power: every process of it killed at once; its
#                                  disks (/root, /var/lib/ag-box, /opt/box, /etc/box) stay
#   rig.sh power-on NODE           boot NODE again on those disks (/run empty, as after a reboot)
# With nodeA up, `up` also starts the S3 server (moto, in nodeA's netns at $S3_ENDPOINT, bucket
# $S3_BUCKET) and tests/s3-fault-proxy.py in front of it ($FAULT_PROXY) and writes each node's /root/.config/box/{env,nodes} for that cluster; every node
# gets /usr/local/bin/ag-box -> /opt/box/bin/ag-box, as install.sh does.
# nodeB's restic is Debian 13's (0.17+, at /opt/box/bin/restic), the others' Debian 12's 0.14.
# NODE is nodeA, nodeB or nodeC.  BASE=${BOX_TEST_BASE:-/srv/boxtest} (keep it out of /tmp: each node has
# a private /tmp).  Progress and timings go to stderr; errors are "rig.sh: error: ..." on stderr.
set -euo pipefail

BASE=${BOX_TEST_BASE:-/srv/boxtest}
HERE=$(cd "$(dirname "$0")" && pwd)
ALL_NODES=(nodeA nodeB nodeC)
declare -A IP=([nodeA]=10.200.0.1 [nodeB]=10.200.0.2 [nodeC]=10.200.0.3)   # only ever configured inside our own netns
declare -A VETH=([nodeA]=bxveth-a [nodeB]=bxveth-b [nodeC]=bxveth-c)
LAN=box-lan                        # the netns holding the bridge that links the nodes
PKGS=(bubblewrap tmux git openssh-server systemd-container iproute2 restic bc curl python3-venv bash-completion openssl ca-certificates podman crun busybox-static)
CLEAN_PATH=/opt/box/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
BOOT_TIMEOUT=${BOX_RIG_BOOT_TIMEOUT:-60}
MOTO=/opt/moto
# Debian 13's restic (0.17+, a static Go program), unpacked without adding the suite to apt's
# sources: nodeB runs it (restores in place), nodeA and nodeC run Debian 12's 0.14.
RESTIC_NEW=/opt/restic-trixie
RESTIC_NEW_NODE=nodeB
# The real agent CLIs, pinned; under /usr, since a box sees the node's /usr and not /opt.
# Claude Code 2.1.197 is the newest that still allows Node 20 (2.1.198+ want Node 22).
AGENTS=/usr/local/lib/ag-box-test-agents
AGENT_PKGS=("@anthropic-ai/claude-code 2.1.197 claude" "@openai/codex 0.171.0 codex")
S3_ENDPOINT=http://10.200.0.1:5001
FAULT_PROXY=10.200.0.1:5002        # tests/s3-fault-proxy.py in front of the S3 server
S3_BUCKET=agent-boxes

PROG=rig.sh
log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
now_us() { echo "${EPOCHREALTIME/./}"; }
secs_since() { local d=$(( $(now_us) - $1 )); printf '%d.%02d' $((d / 1000000)) $((d % 1000000 / 10000)); }
wait_for() { # wait_for TIMEOUT_SECS cmd...   (polls every 0.1 s)
  local end=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do (( SECONDS < end )) || return 1; sleep 0.1; done
}
need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }
valid_node() {
  local n
  for n in "${ALL_NODES[@]}"; do [ "$1" = "$n" ] && return 0; done
  die "unknown node '$1' (known: ${ALL_NODES[*]})"
}

ndir() { echo "$BASE/nodes/$1"; }
leader() { # host PID of the node's PID 1 (sh that exec'd systemd -- same PID), empty if not up
  local cg=/sys/fs/cgroup/systemd/box-$1/payload pid
  pid=$(head -1 "$cg/init.scope/cgroup.procs" 2>/dev/null || true)
  [ -n "$pid" ] || pid=$(head -1 "$cg/cgroup.procs" 2>/dev/null || true)
  echo "$pid"
}
in_node() { local n=$1 l; shift; l=$(leader "$n"); [ -n "$l" ] || return 125
  nsenter -t "$l" -a env -i HOME=/root PATH=$CLEAN_PATH LANG=C.UTF-8 TERM=xterm "$@"; }

# ---------------------------------------------------------------------------------------------
install_pkgs() {
  need_root
  if dpkg-query -W -f '${Status}\n' "${PKGS[@]}" 2>/dev/null | grep -vq '^install ok installed$' ||
     [ "$(dpkg-query -W -f '${Status}\n' "${PKGS[@]}" 2>/dev/null | wc -l)" -ne "${#PKGS[@]}" ]; then
    export DEBIAN_FRONTEND=noninteractive
    # openssh-server's postinst would start sshd on the host: forbid that (restored afterwards)
    local own_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; own_policy=1
    fi
    local rc=0
    { apt-get update -q >/dev/null &&
      apt-get install -y -q "${PKGS[@]}" >/dev/null; } || rc=$?
    [ $own_policy = 0 ] || rm -f /usr/sbin/policy-rc.d
    [ $rc = 0 ] || die "apt-get failed (exit $rc)"
  fi
  command -v systemd-nspawn >/dev/null && [ -x /lib/systemd/systemd ] || die "systemd-nspawn/systemd missing"
  if [ ! -x "$MOTO/bin/moto_server" ]; then
    rm -rf "$MOTO"
    python3 -m venv "$MOTO" && "$MOTO/bin/pip" install -q 'moto[server]' >/dev/null ||
      die "installing moto[server] into $MOTO failed"
  fi
  install_restic_new
  install_agents
}
install_restic_new() {
  [ -x "$RESTIC_NEW/usr/bin/restic" ] && return 0
  local tmp rc=0; tmp=$(mktemp -d)
  echo "deb http://deb.debian.org/debian trixie main" > "$tmp/sources.list"
  mkdir -p "$tmp/lists/partial"
  local opts=(-q -o APT::Sandbox::User=root -o "Dir::Etc::SourceList=$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$tmp/lists")
  { apt-get "${opts[@]}" update >/dev/null &&
    (cd "$tmp" && apt-get "${opts[@]}" download restic >/dev/null) &&
    rm -rf "$RESTIC_NEW.new" && dpkg-deb -x "$tmp"/restic_*.deb "$RESTIC_NEW.new" &&
    "$RESTIC_NEW.new/usr/bin/restic" version >/dev/null &&
    rm -rf "$RESTIC_NEW" && mv "$RESTIC_NEW.new" "$RESTIC_NEW"; } || rc=$?
  rm -rf "$tmp"
  [ $rc = 0 ] || die "fetching Debian 13's restic into $RESTIC_NEW failed (exit $rc)"
}
install_agents() {
  command -v npm >/dev/null || die "npm not found (the agent CLIs are npm packages)"
  local entry pkg version bin
  for entry in "${AGENT_PKGS[@]}"; do
    read -r pkg version bin <<< "$entry"
    "$AGENTS/bin/$bin" --version 2>/dev/null | grep -qF "$version" && continue
    npm install -g --prefix "$AGENTS" --no-fund --no-audit --loglevel=error \
      --allow-scripts="@anthropic-ai/claude-code" "$pkg@$version" >/dev/null ||
      die "installing $pkg@$version into $AGENTS failed"
    "$AGENTS/bin/$bin" --version 2>/dev/null | grep -qF "$version" || die "$AGENTS/bin/$bin is not $version"
  done
}

# ---------------------------------------------------------------------------------------------
# S3 server (moto keeps everything in memory) in nodeA's netns, and the cluster's config files.
s3_stop() {
  local pid f
  for f in moto fault-proxy; do
    pid=$(cat "$BASE/$f.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill "$pid"; wait_for 10 sh -c "! kill -0 $pid" || kill -9 "$pid"; fi
    rm -f "$BASE/$f.pid"
  done
}
s3_start() {
  [ -x "$MOTO/bin/moto_server" ] || die "moto not installed: run '$0 install' first"
  setsid -f sh -c "echo \$\$ > $BASE/moto.pid; exec ip netns exec box-nodeA $MOTO/bin/moto_server -H ${IP[nodeA]} -p 5001" \
    > "$BASE/moto.log" 2>&1 < /dev/null 9<&-     # 9: the rig lock, not the server's to hold
  wait_for 30 ip netns exec box-nodeA curl -s -o /dev/null "$S3_ENDPOINT/" || { tail -20 "$BASE/moto.log" >&2; die "moto did not start"; }
  ip netns exec box-nodeA curl -sf -X PUT "$S3_ENDPOINT/$S3_BUCKET" >/dev/null || die "creating bucket $S3_BUCKET failed"
  setsid -f sh -c "echo \$\$ > $BASE/fault-proxy.pid; exec ip netns exec box-nodeA python3 $HERE/s3-fault-proxy.py \
      --listen $FAULT_PROXY --upstream ${IP[nodeA]}:5001" > "$BASE/fault-proxy.log" 2>&1 < /dev/null 9<&-
  wait_for 10 ip netns exec box-nodeA curl -sf -o /dev/null "http://$FAULT_PROXY/__faults" ||
    { tail -20 "$BASE/fault-proxy.log" >&2; die "the S3 fault proxy did not start"; }
}
write_cluster_config() { # write_cluster_config NODE...
  local n m d
  for n in "$@"; do
    d=$(ndir "$n")
    mkdir -p "$d/root/.config/box"
    printf 'BOX_NODE=%s\nBOX_S3_ENDPOINT=%s\nBOX_BUCKET=%s\nAWS_ACCESS_KEY_ID=test\nAWS_SECRET_ACCESS_KEY=test\nRESTIC_PASSWORD=rig-password\n' \
      "$n" "$S3_ENDPOINT" "$S3_BUCKET" > "$d/root/.config/box/env"
    chmod 600 "$d/root/.config/box/env"
    : > "$d/root/.config/box/nodes"
    for m in "$@"; do
      if [ "$m" = "$n" ]; then echo "$m local"; else echo "$m $m"; fi >> "$d/root/.config/box/nodes"
    done
    in_node "$n" ln -sf /opt/box/bin/ag-box /usr/local/bin/ag-box
  done
}

# ---------------------------------------------------------------------------------------------
# Teardown.  Works from whatever an earlier (possibly killed) run left: node dirs, nspawn
# processes, cgroups, netns, /run/systemd/nspawn.
cg_procs() { # all PIDs in our per-node name=systemd cgroup tree
  local root=/sys/fs/cgroup/systemd/box-$1
  [ -d "$root" ] || return 0
  find "$root" -name cgroup.procs -exec cat {} + 2>/dev/null || true
}
nspawn_pid() { # PID of the node's running nspawn, empty if none
  local pid; pid=$(cat "$(ndir "$1")/nspawn.pid" 2>/dev/null || true)
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
    grep -Eq "/box-$1(/|\$)" "/proc/$pid/cgroup" 2>/dev/null && echo "$pid"   # PID reuse guard
  return 0
}
halt_node() { # ask for a clean halt: nspawn forwards SIGTERM as --kill-signal=SIGRTMIN+3
  local pid; pid=$(nspawn_pid "$1"); [ -z "$pid" ] || kill -TERM "$pid" 2>/dev/null || true
}
stop_node() {
  local n=$1 d pid cg; d=$(ndir "$n")
  pid=$(nspawn_pid "$n")
  if [ -n "$pid" ]; then
    wait_for 30 sh -c "! kill -0 $pid" || kill -KILL "$pid" 2>/dev/null || true
  fi
  # anything still in the node's cgroups (orphaned container after nspawn was SIGKILLed, ...)
  local left; left=$(cg_procs "$n")
  if [ -n "$left" ]; then
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null || true
    wait_for 10 sh -c "[ -z \"\$(find /sys/fs/cgroup/systemd/box-$n -name cgroup.procs -exec cat {} + 2>/dev/null)\" ]" ||
      log "warning: processes left in cgroup box-$n"
  fi
  # remove the cgroups (depth first): name=systemd, unified, and memory (under whichever memory
  # cgroup the launcher lived in -- recorded in memcg, else searched)
  local cgs=("/sys/fs/cgroup/systemd/box-$n" "/sys/fs/cgroup/unified/box-$n")
  [ -s "$d/memcg" ] && cgs+=("$(cat "$d/memcg")")
  while IFS= read -r cg; do cgs+=("$cg"); done < <(find /sys/fs/cgroup/memory -maxdepth 4 -type d -name "box-$n" 2>/dev/null)
  for cg in "${cgs[@]}"; do
    [ -n "$cg" ] && [ -d "$cg" ] && { find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true; }
  done
  ip netns del "box-$n" 2>/dev/null || true   # also destroys the veth pair
  rm -f "/run/netns/box-$n" 2>/dev/null || true
  # node dir: the launcher's bind of / lives in its private mount ns, but never rm -rf across a
  # mount that might be visible here
  if [ -d "$d" ]; then
    local m
    while IFS= read -r m; do umount -l "$m" 2>/dev/null || true; done \
      < <(awk -v p="$d/" 'index($2, p) == 1 || $2 == substr(p, 1, length(p) - 1) {print $2}' /proc/self/mounts | sort -r)
    rm -rf --one-file-system "$d" 2>/dev/null || log "warning: could not remove $d"
  fi
}
nodes_down() {
  local n names=("${ALL_NODES[@]}")
  s3_stop
  for n in "${names[@]}"; do halt_node "$n"; done    # halt all in parallel, then wait + clean
  for n in "${names[@]}"; do stop_node "$n"; done
  ip netns del "$LAN" 2>/dev/null || true
  rmdir "$BASE/nodes" 2>/dev/null || true
  rmdir /run/systemd/nspawn/propagate/* /run/systemd/nspawn/propagate /run/systemd/nspawn/locks \
        /run/systemd/nspawn /run/systemd/nspawn-root 2>/dev/null || true
  return 0
}

# ---------------------------------------------------------------------------------------------
# Bring-up
prepare_node() {
  local n=$1 d; d=$(ndir "$n")
  mkdir -p "$d"/{rootview,root/.ssh,run-box,opt-box/bin,etc-box,etc-ssh,var-lib-ag-box}
  chmod 700 "$d/root" "$d/root/.ssh"
  echo "$n" > "$d/hostname"
  # per-node sshd config dir with its own host key
  cp -a /etc/ssh/. "$d/etc-ssh/"; rm -f "$d"/etc-ssh/ssh_host_*
  mkdir -p "$d/etc-ssh/sshd_config.d"
  ssh-keygen -q -t ed25519 -N '' -C "host@$n" -f "$d/etc-ssh/ssh_host_ed25519_key"
  printf 'HostKey /etc/ssh/ssh_host_ed25519_key\nPasswordAuthentication no\nPermitRootLogin prohibit-password\nUseDNS no\n' \
    > "$d/etc-ssh/sshd_config.d/box-test.conf"
  ssh-keygen -q -t ed25519 -N '' -C "root@$n" -f "$d/root/.ssh/id_ed25519"
  if [ "$n" = "$RESTIC_NEW_NODE" ]; then
    [ -x "$RESTIC_NEW/usr/bin/restic" ] || die "$RESTIC_NEW/usr/bin/restic missing: run '$0 install' first"
    cp "$RESTIC_NEW/usr/bin/restic" "$d/opt-box/bin/restic"
  fi
  ip netns add "box-$n"
  ip -n "box-$n" link set lo up
}

wire_nodes() { # wire_nodes NODE...  -- a bridge linking the nodes, ssh trust among them
  local nodes=("$@") n m d
  if [ ${#nodes[@]} -ge 2 ]; then
    ip netns add "$LAN"
    ip -n "$LAN" link add bxbr0 type bridge
    ip -n "$LAN" link set bxbr0 up
    for n in "${nodes[@]}"; do
      ip link add "${VETH[$n]}" netns "box-$n" type veth peer name "lan-$n" netns "$LAN"
      ip -n "$LAN" link set "lan-$n" master bxbr0 up
      ip -n "box-$n" addr add "${IP[$n]}/24" dev "${VETH[$n]}"
      ip -n "box-$n" link set "${VETH[$n]}" up
    done
  else
    ip -n "box-${nodes[0]}" addr add "${IP[${nodes[0]}]}/32" dev lo   # a lone node can `ssh` itself
  fi
  for n in "${nodes[@]}"; do
    d=$(ndir "$n")
    : > "$d/root/.ssh/authorized_keys"; : > "$d/root/.ssh/known_hosts"; : > "$d/root/.ssh/config"
    for m in "${nodes[@]}"; do
      cat "$(ndir "$m")/root/.ssh/id_ed25519.pub" >> "$d/root/.ssh/authorized_keys"
      echo "$m,${IP[$m]} $(cut -d' ' -f1,2 "$(ndir "$m")/etc-ssh/ssh_host_ed25519_key.pub")" >> "$d/root/.ssh/known_hosts"
      printf 'Host %s\n  HostName %s\n  User root\n  IdentityFile ~/.ssh/id_ed25519\n  BatchMode yes\n  StrictHostKeyChecking yes\n  ConnectTimeout 5\n' \
        "$m" "${IP[$m]}" >> "$d/root/.ssh/config"
    done
    chmod 600 "$d"/root/.ssh/*
  done
}

# Gotchas (see shared recipe): nspawn refuses -D / -> bind / non-recursively onto rootview in a
# private mount ns; nspawn mounts the v1 memory controller ro so MemoryMax would be ignored -> PID 1
# is a sh that remounts it rw, then execs systemd; the launcher lives in its own box-<node> cgroups
# (--keep-unit creates payload/ and supervisor/ there); basic.target + ssh + user-sessions (else
# /run/nologin); CAP_NET_ADMIN (which nspawn drops) lets ag-box bring up lo in a box's own netns.
start_node() {
  local n=$1 d memrel; d=$(ndir "$n")
  memrel=$(awk -F: '$2=="memory"{print $3}' /proc/self/cgroup)
  echo "/sys/fs/cgroup/memory${memrel%/}/box-$n" > "$d/memcg"
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 setsid -f bash -c '
    n=$1; d=$2; memcg=$(cat "$d/memcg")
    for cg in /sys/fs/cgroup/systemd/box-$n /sys/fs/cgroup/unified/box-$n $memcg; do
      mkdir -p $cg && echo $$ > $cg/cgroup.procs || exit 1; done
    echo $$ > $d/nspawn.pid            # the PID survives the execs below: it becomes nspawn
    exec unshare --mount --propagation private sh -c "
      mount --bind / $d/rootview &&
      exec systemd-nspawn --directory=$d/rootview --volatile=overlay \
        --register=no --keep-unit --link-journal=no --console=read-only \
        --machine=$n --hostname=$n --network-namespace-path=/run/netns/box-$n \
        --bind=$d/root:/root --bind=$d/run-box:/run/box --bind=$d/opt-box:/opt/box \
        --bind=$d/etc-box:/etc/box --bind=$d/etc-ssh:/etc/ssh --bind-ro=$d/hostname:/etc/hostname \
        --bind=$d/var-lib-ag-box:/var/lib/ag-box \
        --kill-signal=SIGRTMIN+3 --capability=CAP_NET_ADMIN \
        /bin/sh -c \"mount -o remount,bind,rw /sys/fs/cgroup/memory && exec /lib/systemd/systemd \
            systemd.unit=basic.target systemd.wants=ssh.service systemd.wants=systemd-user-sessions.service\""
  ' _ "$n" "$d" > "$d/nspawn.log" 2>&1 < /dev/null 9>&-
}

node_ready() { local l; l=$(leader "$1"); [ -n "$l" ] &&
  nsenter -t "$l" -a systemctl is-system-running 2>/dev/null | grep -Eq '^(running|degraded)$' &&
  nsenter -t "$l" -a systemctl is-active ssh.service >/dev/null 2>&1; }

nodes_up() {
  need_root
  local nodes=() n m seen
  for n in "$@"; do valid_node "$n"; seen=0
    for m in "${nodes[@]}"; do [ "$m" = "$n" ] && seen=1; done
    [ $seen = 1 ] || nodes+=("$n")
  done
  [ ${#nodes[@]} -gt 0 ] || nodes=("${ALL_NODES[@]}")
  for c in systemd-nspawn nsenter unshare ip ssh-keygen sshd bwrap; do
    command -v "$c" >/dev/null || die "$c not found: run '$0 install' first"
  done
  local t0; t0=$(now_us)
  nodes_down                                  # leftovers of an earlier (killed) run
  log "cleanup $(secs_since "$t0")s"
  t0=$(now_us)
  for n in "${nodes[@]}"; do prepare_node "$n"; done
  wire_nodes "${nodes[@]}"
  log "prepare ${nodes[*]} (keys, netns, veth) $(secs_since "$t0")s"
  t0=$(now_us)
  for n in "${nodes[@]}"; do start_node "$n"; done
  for n in "${nodes[@]}"; do
    if ! wait_for "$BOOT_TIMEOUT" node_ready "$n"; then
      local l; l=$(leader "$n")
      {
        printf '%s: error: %s did not boot to running systemd + sshd within %ss (leader=%s)\n' \
          "$PROG" "$n" "$BOOT_TIMEOUT" "${l:-none}"
        [ -z "$l" ] || nsenter -t "$l" -a systemctl --failed --no-pager 2>&1 | sed 's/^/  failed| /' || true
        echo "--- tail of $(ndir "$n")/nspawn.log:"; tail -30 "$(ndir "$n")/nspawn.log" 2>&1 || true
      } >&2
      exit 1
    fi
  done
  log "boot ${nodes[*]} to sshd $(secs_since "$t0")s"
  t0=$(now_us)
  write_cluster_config "${nodes[@]}"
  for n in "${nodes[@]}"; do [ "$n" != nodeA ] || s3_start; done
  log "S3 + cluster config $(secs_since "$t0")s"
}

power_off() { # SIGKILL the node whole, as a power cut would; keep its dirs, netns and link
  local n=$1 d left; d=$(ndir "$n")
  left=$(cg_procs "$n")
  # shellcheck disable=SC2086
  [ -z "$left" ] || kill -KILL $left 2>/dev/null || true
  wait_for 10 sh -c "[ -z \"\$(find /sys/fs/cgroup/systemd/box-$n -name cgroup.procs -exec cat {} + 2>/dev/null)\" ]" ||
    die "processes of $n survived the power cut"
  local cgs=("/sys/fs/cgroup/systemd/box-$n" "/sys/fs/cgroup/unified/box-$n")
  [ -s "$d/memcg" ] && cgs+=("$(cat "$d/memcg")")
  for cg in "${cgs[@]}"; do
    [ -n "$cg" ] && [ -d "$cg" ] && { find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true; }
  done
  local m
  while IFS= read -r m; do umount -l "$m" 2>/dev/null || true; done \
    < <(awk -v p="$d/rootview" 'index($2, p) == 1 {print $2}' /proc/self/mounts | sort -r)
}
power_on() {
  local n=$1 d; d=$(ndir "$n")
  [ -d "$d/root" ] || die "$n has no disks to boot from (rig.sh up first)"
  [ -z "$(leader "$n")" ] || die "$n is running"
  find "$d/run-box" -mindepth 1 -delete 2>/dev/null || true     # /run does not survive a reboot
  start_node "$n"
  wait_for "$BOOT_TIMEOUT" node_ready "$n" || { tail -30 "$d/nspawn.log" >&2; die "$n did not boot again"; }
  in_node "$n" ln -sf /opt/box/bin/ag-box /usr/local/bin/ag-box
}

status() {
  local n l st
  for n in "${ALL_NODES[@]}"; do
    l=$(leader "$n")
    if [ -n "$l" ]; then
      st=$(in_node "$n" systemctl is-system-running 2>/dev/null || true)
      printf '%-6s up    leader=%-8s system=%-10s dir=%s\n' "$n" "$l" "${st:-?}" "$(ndir "$n")"
    else
      printf '%-6s down%s\n' "$n" "$([ -d "$(ndir "$n")" ] && echo "  (leftover dir $(ndir "$n"))")"
    fi
  done
}

usage() { sed -n '/^# Usage/,/^# a private/p' "$0" | sed 's/^# \{0,1\}//' >&2; }

cmd=${1:-}; [ $# -gt 0 ] && shift
case "$cmd" in
  install) install_pkgs ;;
  up)      mkdir -p "$BASE"; exec 9< "$BASE"; flock 9; nodes_up "$@" ;;   # lock: serialise up/down
  down)    need_root; if [ -d "$BASE" ]; then exec 9< "$BASE"; flock 9; fi
           nodes_down || true; exit 0 ;;
  exec)    [ $# -ge 2 ] || { usage; die "usage: exec NODE [KEY=VAL...] CMD..."; }
           valid_node "$1"; n=$1; shift
           [ -n "$(leader "$n")" ] || { printf '%s: error: node %s is not up\n' "$PROG" "$n" >&2; exit 125; }
           exec nsenter -t "$(leader "$n")" -a env -i HOME=/root PATH=$CLEAN_PATH LANG=C.UTF-8 TERM=xterm "$@" ;;
  leader)  [ $# = 1 ] || die "usage: leader NODE"; valid_node "$1"
           l=$(leader "$1"); [ -n "$l" ] || die "node $1 is not up"; echo "$l" ;;
  dir)     [ $# = 1 ] || die "usage: dir NODE"; valid_node "$1"; ndir "$1" ;;
  status)  status ;;
  link-down|link-up)
           [ $# = 1 ] || die "usage: $cmd NODE"; valid_node "$1"
           ip -n "box-$1" link set "${VETH[$1]}" "${cmd#link-}" ;;
  power-off|power-on)
           [ $# = 1 ] || die "usage: $cmd NODE"; valid_node "$1"; need_root
           exec 9< "$BASE"; flock 9; "${cmd/-/_}" "$1" ;;
  -h|--help|help) usage ;;
  *)       usage; die "unknown subcommand '${cmd}'" ;;
esac
