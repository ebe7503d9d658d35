#!/usr/bin/env bash
# Builds the gangscaler container image without any image registry and smoke-tests it:
#
#  1. a static binary (glibc's static-pie, rustls + ring: no shared library, no OpenSSL),
#     cached under $CARGO_TARGET_DIR (default $HOME/.cache/gangscaler/target);
#  2. the image, `FROM scratch` with that one file (docker/Dockerfile.local, the final stage of
#     ./Dockerfile), with buildah's vfs storage and chroot isolation (no daemon, no registry);
#  3. inside the image, as uid 65532: `validate` on the shipped provider-configs, then `serve`
#     on them (listen addresses moved to free loopback ports through the GANGSCALER__SERVER__*
#     environment overrides) until /readyz answers 200; the server is stopped by its pid. It
#     also checks that the image has no shell and that the binary needs no dynamic loader.
#
# Prints the static binary's path on the last line, for GANGSCALER_BIN.
# Usage: scripts/image.sh [image-name]   (default localhost/gangscaler:<version>-<commit>)
# Needs buildah (scripts/install-deps.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/gangscaler/target}
log() { printf '[image] %s\n' "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }
command -v buildah >/dev/null || die "buildah is not installed (scripts/install-deps.sh)"
command -v strip >/dev/null || die "strip (binutils) is not installed"

target=x86_64-unknown-linux-gnu
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
image=${1:-localhost/gangscaler:$version-$commit}
buildah=(buildah --storage-driver vfs)

log "static binary (cargo build --release --target $target, crt-static)"
# RUSTFLAGS only reach the --target artifacts, so this does not invalidate host builds.
RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --quiet --release --locked --target "$target" --bin gangscaler
bin="$CARGO_TARGET_DIR/$target/release/gangscaler"
[ -x "$bin" ] || die "no binary at $bin"
if readelf -l "$bin" | grep -q 'Requesting program interpreter'; then
  die "$bin asks for a dynamic loader; it would not start FROM scratch"
fi
if readelf -d "$bin" 2>/dev/null | grep -q NEEDED; then
  die "$bin needs shared libraries: $(readelf -d "$bin" | grep NEEDED | tr -s ' ')"
fi
log "$bin: static, $(($(stat -c %s "$bin") / 1024 / 1024)) MiB"

ctx=$(mktemp -d)
ctr=""
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && alive "$server_pid"; then kill -KILL "$server_pid" 2>/dev/null || true; fi
  if [ -n "$ctr" ]; then "${buildah[@]}" rm "$ctr" >/dev/null 2>&1 || true; fi
  rm -rf "$ctx"
}
trap cleanup EXIT
# The release profile keeps line tables (backtraces for the host and e2e binary); the image
# gets a stripped copy (about a sixth of the size).
strip --strip-all -o "$ctx/gangscaler" "$bin"
cp docker/Dockerfile.local "$ctx/Dockerfile"

log "building $image (buildah bud, vfs, chroot isolation)"
# A rebuild of the same tag would leave the previous image dangling: remove it first.
"${buildah[@]}" rmi "$image" >/dev/null 2>&1 || true
"${buildah[@]}" bud --quiet --isolation chroot --layers=false -t "$image" "$ctx" >/dev/null
user=$("${buildah[@]}" inspect --type image --format '{{.OCIv1.Config.User}}' "$image")
[ "$user" = "65532:65532" ] || die "image user is '$user', not 65532:65532"
ctr=$("${buildah[@]}" from --quiet --pull=never "$image")

run() {
  "${buildah[@]}" run --isolation chroot --network host --user 65532:65532 \
    -v "$PWD/provider-configs:/etc/gangscaler/config:ro" "$@"
}

log "no shell in the image"
if run "$ctr" -- /bin/sh -c true >/dev/null 2>&1; then die "/bin/sh ran inside the image"; fi

log "gangscaler --version and validate inside the image"
run "$ctr" -- /gangscaler --version
run "$ctr" -- /gangscaler validate /etc/gangscaler/config >/dev/null || die "validate failed inside the image"

# Free loopback ports: chroot isolation shares the host's network namespace.
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 12000))
    ss -Htln "sport = :$p" | grep -q . || { echo "$p"; return; }
  done
}
grpc=$(free_port)
http=$(free_port)
while [ "$http" = "$grpc" ]; do http=$(free_port); done
log "serve inside the image on 127.0.0.1:$grpc (gRPC) and 127.0.0.1:$http (metrics)"
slog="$ctx/serve.log"
run -e "GANGSCALER__SERVER__ADDRESS=127.0.0.1:$grpc" -e "GANGSCALER__SERVER__METRICS_ADDRESS=127.0.0.1:$http" \
  "$ctr" -- /gangscaler serve --config /etc/gangscaler/config >"$slog" 2>&1 &
runner=$!

# Running and not a zombie (an exited child stays one until it is waited for).
alive() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $state != Z* ]]
}
# The gangscaler process is a descendant of buildah's; it is the one stopped by pid.
descendants() {
  local p
  for p in $(ps -o pid= --ppid "$1"); do echo "$p"; descendants "$p"; done
}
ready=""
for _ in $(seq 1 100); do
  if ! alive "$runner"; then cat "$slog" >&2; die "serve exited inside the image"; fi
  for p in $(descendants "$runner"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = gangscaler ] && server_pid=$p
  done
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http/readyz" || true)
  if [ "$code" = 200 ] && [ -n "$server_pid" ]; then ready=1; break; fi
  sleep 0.2
done
[ -n "$ready" ] || { cat "$slog" >&2; die "/readyz did not answer 200"; }
uid=$(awk '/^Uid:/ {print $2}' "/proc/$server_pid/status")
[ "$uid" = 65532 ] || die "serve runs as uid $uid, not 65532"
curl -sf "http://127.0.0.1:$http/metrics" | grep -q '^# HELP gangscaler_config_valid' || die "/metrics lacks gangscaler_config_valid"
log "/readyz 200 from pid $server_pid (uid $uid); stopping it"
kill -TERM "$server_pid"
for _ in $(seq 1 50); do alive "$runner" || break; sleep 0.2; done
if alive "$runner"; then die "serve did not stop on SIGTERM"; fi
wait "$runner" || true
grep -q 'gangscaler stopped' "$slog" || { cat "$slog" >&2; die "serve did not shut down cleanly"; }
server_pid=""

# vfs storage keeps a full copy per image: drop this script's images of earlier commits.
repo=${image%:*}
for old in $("${buildah[@]}" images --noheading --format '{{.Name}}:{{.Tag}}'); do
  if [ "${old%:*}" = "$repo" ] && [ "$old" != "$image" ]; then "${buildah[@]}" rmi "$old" >/dev/null || true; fi
done
log "image $image OK ($("${buildah[@]}" images --format '{{.Size}}' "$image" | head -1))"
echo "$bin"
