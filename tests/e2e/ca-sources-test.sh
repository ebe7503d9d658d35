#!/usr/bin/env bash
# Tests tests/e2e/ca-sources.sh without the network: a copy of it runs in a scratch folder
# with its own versions.env and a local git repository standing in for kubernetes/autoscaler.
# Checks: GANGSCALER_CA_SOURCES wins; a version with neither sources nor a pinned commit is
# refused; a tag whose commit is not the pinned one is refused and leaves nothing cached; the
# pinned commit is fetched, cached and then used without fetching again.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ca-sources-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
fail() { printf 'ca-sources-test: FAIL: %s\n' "$*" >&2; exit 1; }
git_() { git -c user.name=t -c user.email=t@example.invalid -c init.defaultBranch=main "$@"; }

# A copy of the script in a tree shaped like the repository, with no ../shared beside it.
mkdir -p "$scratch/repo/tests/e2e"
cp "$here/ca-sources.sh" "$scratch/repo/tests/e2e/"
script="$scratch/repo/tests/e2e/ca-sources.sh"
export GANGSCALER_CACHE="$scratch/cache"

# The stand-in upstream: tag cluster-autoscaler-9.9.9 with a cluster-autoscaler/go.mod.
upstream="$scratch/upstream"
mkdir -p "$upstream/cluster-autoscaler"
echo "module k8s.io/autoscaler/cluster-autoscaler" > "$upstream/cluster-autoscaler/go.mod"
git_ -C "$upstream" init -q
git_ -C "$upstream" add -A
git_ -C "$upstream" commit -q -m release
git_ -C "$upstream" tag cluster-autoscaler-9.9.9
good=$(git -C "$upstream" rev-parse HEAD)
export GANGSCALER_CA_REPO="$upstream"

# 1. GANGSCALER_CA_SOURCES wins.
mkdir -p "$scratch/given/9.9.9"
touch "$scratch/given/9.9.9/go.mod"
echo 'CA_COMMIT_9_9_9=0000000000000000000000000000000000000000' > "$scratch/repo/tests/e2e/versions.env"
got=$(GANGSCALER_CA_SOURCES="$scratch/given" "$script" 9.9.9 2>/dev/null)
[ "$got" = "$scratch/given/9.9.9" ] || fail "GANGSCALER_CA_SOURCES not used: $got"

# 2. No sources and no pinned commit: refused, naming the variable.
if msg=$("$script" 8.8.8 2>&1 >/dev/null); then fail "8.8.8 had neither sources nor a pin"; fi
[[ "$msg" == *CA_COMMIT_8_8_8* ]] || fail "the refusal does not name CA_COMMIT_8_8_8: $msg"

# 3. The tag is another commit than the pinned one: refused, nothing cached.
if msg=$("$script" 9.9.9 2>&1 >/dev/null); then fail "a tag of another commit was accepted"; fi
[[ "$msg" == *"refusing cluster-autoscaler-9.9.9"*"$good"* ]] || fail "the refusal does not name the commits: $msg"
[ ! -e "$GANGSCALER_CACHE/e2e/ca-src/9.9.9" ] || fail "a refused fetch left files in the cache"

# 4. The pinned commit: fetched, checked, cached; then used from the cache.
echo "CA_COMMIT_9_9_9=$good" > "$scratch/repo/tests/e2e/versions.env"
got=$("$script" 9.9.9 2>/dev/null)
[ "$got" = "$GANGSCALER_CACHE/e2e/ca-src/9.9.9/cluster-autoscaler" ] || fail "fetched into $got"
[ -f "$got/go.mod" ] || fail "no go.mod in the fetched sources"
rm -rf "$upstream"
got=$("$script" 9.9.9 2>/dev/null) || fail "the cached sources were not used once the repository was gone"
[ -f "$got/go.mod" ] || fail "cached sources lost"
echo "ca-sources-test: 4 passed, 0 failed"
