#!/usr/bin/env bash
# Installs the system packages the test suite needs beyond Rust and Go: buildah, to build and
# smoke-test the container image (scripts/image.sh). Idempotent: a package already present is
# left alone, so a warm machine runs no apt at all. helm is not installed here: it is a Go
# module, built into the e2e cache by tests/e2e/build.sh.
set -euo pipefail
log() { printf '[install-deps] %s\n' "$*" >&2; }

missing=()
command -v buildah >/dev/null || missing+=(buildah)
if [ ${#missing[@]} -eq 0 ]; then
  log "nothing to install (buildah $(buildah --version | awk '{print $3}'))"
  exit 0
fi

sudo=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { log "need root or sudo to install ${missing[*]}"; exit 1; }
  sudo=(sudo)
fi
log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
