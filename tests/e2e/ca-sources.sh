#!/usr/bin/env bash
# Prints the folder holding the cluster-autoscaler VERSION sources (its go.mod at the top),
# for tests/e2e/build.sh. In order:
#   1. $GANGSCALER_CA_SOURCES/VERSION, when GANGSCALER_CA_SOURCES is set;
#   2. ../shared/cluster-autoscaler/VERSION beside the repository (this project's workplace
#      keeps the three versions there, trimmed to the externalgrpc build);
#   3. otherwise the upstream tag cluster-autoscaler-VERSION of kubernetes/autoscaler
#      (override the repository with GANGSCALER_CA_REPO), fetched once with git into
#      $HOME/.cache/gangscaler/e2e/ca-src/VERSION: only that tag's commit, checked against the
#      commit pinned in versions.env (CA_COMMIT_<version>) before it is used; a mismatch or a
#      failed fetch leaves nothing in the cache. Git checks every object against its hash, so
#      the pinned commit pins the whole tree.
# Says on stderr which one it uses. Exits 2 when none can be had.
#
# Usage: tests/e2e/ca-sources.sh VERSION
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
version=${1:?usage: ca-sources.sh VERSION}
log() { printf '[ca-sources] %s\n' "$*" >&2; }

if [ -n "${GANGSCALER_CA_SOURCES:-}" ]; then
  src="$GANGSCALER_CA_SOURCES/$version"
  [ -f "$src/go.mod" ] || { log "GANGSCALER_CA_SOURCES=$GANGSCALER_CA_SOURCES has no $version/go.mod"; exit 2; }
  log "cluster-autoscaler $version: $src (GANGSCALER_CA_SOURCES)"
  echo "$src"; exit 0
fi
shared="$here/../../../shared/cluster-autoscaler/$version"
if [ -f "$shared/go.mod" ]; then
  src=$(cd "$shared" && pwd)
  log "cluster-autoscaler $version: $src"
  echo "$src"; exit 0
fi

commit_var="CA_COMMIT_${version//./_}"
commit=${!commit_var:-}
[ -n "$commit" ] || { log "no sources for cluster-autoscaler $version and no pinned commit $commit_var in versions.env"; exit 2; }
cache=${GANGSCALER_CACHE:-$HOME/.cache/gangscaler}/e2e/ca-src
dest="$cache/$version"
if [ -f "$dest/.commit" ] && [ "$(cat "$dest/.commit")" = "$commit" ]; then
  log "cluster-autoscaler $version: $dest/cluster-autoscaler (fetched before, commit $commit)"
  echo "$dest/cluster-autoscaler"; exit 0
fi
repo=${GANGSCALER_CA_REPO:-https://github.com/kubernetes/autoscaler}
tag="cluster-autoscaler-$version"
log "no cluster-autoscaler $version sources beside the repository: fetching tag $tag of $repo (pinned commit $commit)"
work=$(mktemp -d "${TMPDIR:-/tmp}/ca-src.XXXXXX")
trap 'rm -rf "$work"' EXIT
git -C "$work" init -q
if ! git -C "$work" fetch -q --depth 1 "$repo" "refs/tags/$tag"; then
  log "fetching $tag from $repo failed; set GANGSCALER_CA_SOURCES to a folder holding $version/ (a checkout's cluster-autoscaler directory)"
  exit 2
fi
got=$(git -C "$work" rev-parse 'FETCH_HEAD^{commit}')
if [ "$got" != "$commit" ]; then
  log "refusing $tag from $repo: it is commit $got, versions.env pins $commit"
  exit 2
fi
git -C "$work" -c advice.detachedHead=false checkout -q "$got"
[ -f "$work/cluster-autoscaler/go.mod" ] || { log "$tag has no cluster-autoscaler/go.mod"; exit 2; }
echo "$commit" > "$work/.commit"
rm -rf "$work/.git"
mkdir -p "$cache"
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
log "cluster-autoscaler $version: fetched commit $commit into $dest"
echo "$dest/cluster-autoscaler"
