#!/usr/bin/env bash
# Loopback load test of NodeGroupForNode, NodeGroupTargetSize and NodeGroupNodes with ghz (from the Go module
# proxy), against gangscaler with 100 node groups x 100 instances (10,000 instances), and
# against a trivial tonic server of the same service as the ceiling. Both servers listen on
# 127.0.0.1 and are stopped by pid. Prints one summary line per run.
#
# Usage: scripts/load.sh [requests-per-run] [concurrency]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
C=${2:-50}
GHZ_VERSION=v0.120.0
CACHE=${GANGSCALER_CACHE:-$HOME/.cache/gangscaler}
BIN=$CACHE/bin
GHZ=$BIN/ghz-$GHZ_VERSION
if [ ! -x "$GHZ" ]; then
  mkdir -p "$BIN"
  tmp=$(mktemp -d)
  GOTOOLCHAIN=local GOBIN="$tmp" go install "github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION"
  mv "$tmp/ghz" "$GHZ"
  rmdir "$tmp"
fi
cargo build --release --quiet --bin gangscaler --example trivial_server
TARGET=${CARGO_TARGET_DIR:-target}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/config/nodegroups"
cat > "$work/config/provider.yaml" <<YAML
server: {address: "127.0.0.1:18087", metricsAddress: "127.0.0.1:19464", plaintext: true}
defaults: {backend: {type: memory}}
YAML
for i in $(seq -f "%03g" 0 99); do
  cat > "$work/config/nodegroups/group-$i.yaml" <<YAML
id: group-$i
minSize: 100
maxSize: 200
instanceType: m7i.8xlarge
region: us-east-1
zone: us-east-1a
capacity: {cpu: "32", memory: 128Gi, ephemeralStorage: 200Gi, pods: 110}
YAML
done

GANGSCALER_LOG=warn "$TARGET/release/gangscaler" serve --config "$work/config" 2>"$work/gangscaler.log" &
pids+=($!)
"$TARGET/release/examples/trivial_server" 127.0.0.1:18088 &
pids+=($!)
for _ in $(seq 100); do
  curl -fsS http://127.0.0.1:19464/readyz >/dev/null 2>&1 && break
  sleep 0.1
done

run() { # name addr method data
  "$GHZ" --insecure --proto proto/externalgrpc.proto -i proto \
    --call "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/$3" \
    -d "$4" -n "$N" -c "$C" --connections 4 --format json "$2" > "$work/ghz.json"
  python3 - "$1" "$3" "$work/ghz.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[3]))
lat = {d["percentage"]: d["latency"] / 1e3 for d in r.get("latencyDistribution") or []}
codes = r.get("statusCodeDistribution", {})
print(f"{sys.argv[1]:<10} {sys.argv[2]:<20} rps {r['rps']:>9.0f}  p50 {lat.get(50, 0):>7.0f} us  p99 {lat.get(99, 0):>7.0f} us  codes {codes}")
with open(sys.argv[3] + ".rps", "a") as out:
    out.write(f"{sys.argv[1]} {sys.argv[2]} {r['rps']}\n")
PY
  cat "$work/ghz.json.rps" >> "$work/rps.txt"
  rm -f "$work/ghz.json.rps"
}

# A providerID that exists: group-042's 7th instance.
PID="gangscaler-memory://group-042/group-042-00007"
run gangscaler 127.0.0.1:18087 NodeGroupForNode "{\"node\":{\"providerID\":\"$PID\",\"name\":\"group-042-00007\"}}"
run gangscaler 127.0.0.1:18087 NodeGroupTargetSize '{"id":"group-042"}'
run gangscaler 127.0.0.1:18087 NodeGroupNodes '{"id":"group-042"}'
run trivial 127.0.0.1:18088 NodeGroupForNode "{\"node\":{\"providerID\":\"$PID\"}}"
run trivial 127.0.0.1:18088 NodeGroupTargetSize '{"id":"group-042"}'
run trivial 127.0.0.1:18088 NodeGroupNodes '{"id":"group-042"}'
echo "gangscaler throughput as a share of the trivial server's (target >= 80%):"
python3 - "$work/rps.txt" <<'PY'
import sys
rps = {}
for line in open(sys.argv[1]):
    server, rpc, value = line.split()
    rps[(server, rpc)] = float(value)
for (server, rpc), value in sorted(rps.items()):
    if server == "gangscaler" and ("trivial", rpc) in rps:
        print(f"  {rpc:<20} {100 * value / rps[('trivial', rpc)]:5.1f}%")
PY
echo "server-side handling time under load (grpc_server_handling_seconds):"
curl -fsS http://127.0.0.1:19464/metrics > "$work/metrics.txt"
python3 - "$work/metrics.txt" <<'PY'
import re, sys
count, total, buckets = {}, {}, {}
for line in open(sys.argv[1]):
    m = re.match(r'grpc_server_handling_seconds_(count|sum|bucket)\{([^}]*)\} (\S+)', line)
    if not m:
        continue
    kind, labels, v = m.groups()
    labels = dict(re.findall(r'(\w+)="([^"]*)"', labels))
    rpc, le = labels.get("grpc_method"), labels.get("le")
    if kind == "count": count[rpc] = float(v)
    elif kind == "sum": total[rpc] = float(v)
    else: buckets.setdefault(rpc, []).append((float(le), float(v)))
for rpc in sorted(count):
    n = count[rpc]
    bound = next((le for le, c in sorted(buckets[rpc]) if c >= 0.99 * n), float("inf"))
    print(f"  {rpc:<20} calls {n:>8.0f}  mean {total[rpc] / n * 1e6:6.2f} us  p99 <= {bound * 1e6:.0f} us (histogram bucket)")
PY
