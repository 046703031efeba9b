#!/bin/bash
# bench/egress.sh [SECONDS] -- what a box's egress proxy costs, on the rig (root).
# Boots nodeA and nodeB; nginx on nodeB (10.200.0.2:8090) answers every request with 3 bytes.
# From nodeA, the same server, in the same run: wrk directly from the node's network, and wrk
# inside a box (network=allow, one entry for the server) through its proxy, at 1 and 100
# connections; curl for a CONNECT tunnel plus one request on a fresh connection each time, and
# for 2000 requests in a row in one tunnel; then the proxy's memory. Prints one table; the goal is < 1 ms added per request at 1
# connection and no errors at 100.
set -euo pipefail
trap 'echo "bench/egress.sh: failed at line $LINENO" >&2' ERR
cd "$(dirname "$0")/.."
SECS=${1:-10}
SERVER=10.200.0.2:8090
command -v wrk >/dev/null && command -v nginx >/dev/null || {
  echo "bench/egress.sh: installing wrk and nginx-light (apt-get)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk nginx-light >/dev/null
}
cargo build --release -q
trap 'tests/rig.sh down' EXIT
tests/rig.sh up nodeA nodeB
install -m 755 target/release/ag-box "$(tests/rig.sh dir nodeA)/opt-box/bin/ag-box"
on() { local n=$1; shift; tests/rig.sh exec "$n" bash -c "$*"; }

cat > "$(tests/rig.sh dir nodeB)/root/bench-nginx.conf" <<CONF
worker_processes 1;
pid /root/bench-nginx.pid;
error_log /root/bench-nginx.err;
events { worker_connections 1024; }
http {
  access_log off;
  keepalive_requests 1000000;
  server { listen $SERVER; location / { return 200 "ok\n"; } }
}
CONF
on nodeB "systemd-run --unit bench-nginx --quiet nginx -c /root/bench-nginx.conf -g 'daemon off;'"
cat > "$(tests/rig.sh dir nodeA)/root/bench-proxy.lua" <<LUA
-- Every request in absolute form: wrk talks to the proxy as to an HTTP proxy.
wrk.path = "http://$SERVER/"
wrk.headers["Host"] = "$SERVER"
LUA
on nodeA "mkdir -p /srv/bench-egress && echo x > /srv/bench-egress/f && ag-box init >/dev/null 2>&1
          ag-box track bench-egress /srv/bench-egress >/dev/null 2>&1 || true
          ag-box set bench-egress network=allow allow=$SERVER >/dev/null 2>&1
          ag-box up bench-egress >/dev/null 2>&1
          cp /root/bench-proxy.lua /srv/bench-egress/bench-proxy.lua"
cat > "$(tests/rig.sh dir nodeA)/root/curl-loop.sh" <<LOOP
for i in \$(seq 200); do curl -s -o /dev/null -w '%{time_total}\\n' "\$@" http://$SERVER/; done
LOOP
cat > "$(tests/rig.sh dir nodeA)/root/curl-reuse.sh" <<REUSE
curl -s -o /dev/null -w '%{time_total}\\n' "\$@" "http://$SERVER/?[1-2000]"
REUSE
on nodeA "cp /root/curl-loop.sh /root/curl-reuse.sh /srv/bench-egress/"
on nodeA "for i in \$(seq 50); do curl -sf http://$SERVER/ >/dev/null && exit 0; sleep 0.1; done; exit 1"

# wrk's summary as "requests_per_s avg_latency_ms errors"
wrk_row() {
  awk '/Requests\/sec/ { rps = $2 }
       /^    Latency/ { v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v);
                        ms = (u == "us") ? v / 1000 : (u == "s") ? v * 1000 : v }
       /Socket errors/ { split($0, a, /[ ,]+/); for (i in a) if (a[i] ~ /^[0-9]+$/) err += a[i] }
       /Non-2xx/ { err += $NF }
       END { printf "%.0f %.3f %d\n", rps, ms, err + 0 }'
}
direct() { on nodeA "wrk -t$1 -c$2 -d${SECS}s --latency http://$SERVER/" | wrk_row; }
proxied() { on nodeA "ag-box exec bench-egress -- wrk -t$1 -c$2 -d${SECS}s -s /srv/bench-egress/bench-proxy.lua http://127.0.0.1:3128" | wrk_row; }
# mean milliseconds per request of a curl script: on the node, or in the box through a CONNECT
# tunnel (curl-loop: 200 fresh connections; curl-reuse: 2000 requests on one connection)
curl_mean() {
  local script=$1 how=$2
  if [ "$how" = box ]; then on nodeA "ag-box exec bench-egress -- bash /srv/bench-egress/$script --proxytunnel"
  else on nodeA "bash /srv/bench-egress/$script"; fi | awk '{ s += $1; n++ } END { printf "%.3f\n", s / n * 1000 }'
}
read -r d1_rps d1_ms d1_err < <(direct 1 1)
read -r p1_rps p1_ms p1_err < <(proxied 1 1)
read -r d100_rps d100_ms d100_err < <(direct 2 100)
read -r p100_rps p100_ms p100_err < <(proxied 2 100)
c_direct=$(curl_mean curl-loop.sh host)
c_tunnel=$(curl_mean curl-loop.sh box)
r_direct=$(curl_mean curl-reuse.sh host)
r_tunnel=$(curl_mean curl-reuse.sh box)
pid=$(on nodeA "systemctl show -p MainPID --value boxnet-bench-egress")
mem=$(on nodeA "grep -E '^(VmRSS|VmHWM)' /proc/$pid/status" | awk '{ printf "%s %s kB  ", $1, $2 }')
on nodeA "ag-box park bench-egress" >/dev/null 2>&1 || true

printf '%-44s %12s %12s %10s %8s\n' "case (server $SERVER, ${SECS}s each)" "direct" "via proxy" "added" "errors"
printf '%-44s %9.3f ms %9.3f ms %7.3f ms %8s\n' "latency, 1 connection, keep-alive (wrk avg)" "$d1_ms" "$p1_ms" "$(echo "$p1_ms - $d1_ms" | bc -l)" "$p1_err"
printf '%-44s %8s r/s %8s r/s %10s %8s\n' "throughput, 1 connection" "$d1_rps" "$p1_rps" "" "$p1_err"
printf '%-44s %8s r/s %8s r/s %10s %8s\n' "throughput, 100 connections" "$d100_rps" "$p100_rps" "" "$p100_err"
printf '%-44s %9.3f ms %9.3f ms %7.3f ms %8s\n' "latency, 100 connections (wrk avg)" "$d100_ms" "$p100_ms" "$(echo "$p100_ms - $d100_ms" | bc -l)" ""
printf '%-44s %9.3f ms %9.3f ms %7.3f ms %8s\n' "fresh connection + request (curl, CONNECT)" "$c_direct" "$c_tunnel" "$(echo "$c_tunnel - $c_direct" | bc -l)" ""
printf '%-44s %9.3f ms %9.3f ms %7.3f ms %8s\n' "request in a kept tunnel (curl, 2000 in a row)" "$r_direct" "$r_tunnel" "$(echo "$r_tunnel - $r_direct" | bc -l)" ""
printf '%-44s %s\n' "proxy memory after the runs" "$mem"
