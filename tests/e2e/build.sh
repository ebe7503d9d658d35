#!/usr/bin/env bash
# Builds the e2e binaries into a cache keyed by version:
#   $HOME/.cache/gangscaler/e2e/k8s-<version>/{kube-apiserver,kube-scheduler,kube-controller-manager}
#   $HOME/.cache/gangscaler/e2e/etcd-<version>/etcd
#   $HOME/.cache/gangscaler/e2e/kwok-<version>/kwok
#   $HOME/.cache/gangscaler/e2e/ca-<version>/cluster-autoscaler
#   $HOME/.cache/gangscaler/e2e/helm-<version>/helm
#   $HOME/.cache/gangscaler/e2e/capi-<version>/manager   (Cluster API core controllers)
# The control plane, etcd, kwok and helm come from the Go module proxy. The Go module proxy refuses
# k8s.io/autoscaler/cluster-autoscaler, so the real cluster-autoscaler is built from upstream
# sources that tests/e2e/ca-sources.sh finds: GANGSCALER_CA_SOURCES, else
# ../shared/cluster-autoscaler/<version> (trimmed to the externalgrpc build), else the pinned
# upstream tag fetched with git into the cache. It is built with -o into the cache, never in
# place: the sources may be read-only. A warm cache rebuilds nothing. Prints the
# binary directory of each part.
#
# Usage: tests/e2e/build.sh [k8s-minor] [--legacy-ca]   (default minor 1.36)
#   --legacy-ca also builds the legacy-wire CA of versions.env (CA_LEGACY).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
minor=${E2E_K8S_MINOR:-1.36}
legacy=0
for arg in "$@"; do
  case "$arg" in
    --legacy-ca) legacy=1 ;;
    -*) echo "unknown option $arg" >&2; exit 2 ;;
    *) minor=$arg ;;
  esac
done
row_var="K8S_${minor/./_}"
row=${!row_var:-}
[ -n "$row" ] || { echo "no version row $row_var in versions.env" >&2; exit 2; }
read -r _ k8s_version staging_version _ _ ca_version _ <<<"$row"
[ -n "$ca_version" ] || { echo "version row $row_var has no cluster-autoscaler column" >&2; exit 2; }
export GOTOOLCHAIN=local CGO_ENABLED=0
cache=${GANGSCALER_CACHE:-$HOME/.cache/gangscaler}/e2e
log() { printf '[e2e-build] %s\n' "$*" >&2; }

build_k8s() {
  local out="$cache/k8s-$k8s_version"
  if [ -x "$out/kube-apiserver" ] && [ -x "$out/kube-scheduler" ] && [ -x "$out/kube-controller-manager" ]; then
    echo "$out"; return
  fi
  log "building kube-apiserver, kube-scheduler, kube-controller-manager $k8s_version (cold: about 10 min on 2 cores)"
  # The wrapper module is generated from the version row: k8s.io/kubernetes requires its staging
  # modules at v0.0.0 and replaces them with local paths, which a dependent module cannot use, so
  # every staging module is replaced with its published version. go.sum entries are checked
  # against the Go checksum database as usual.
  local wrap="$cache/wrappers/k8s-$k8s_version"
  # A row may need a newer Go than the machine's (versions.env: GOTOOLCHAIN_<minor>); only
  # this build uses it.
  local toolchain_var="GOTOOLCHAIN_${minor/./_}"
  local GOTOOLCHAIN=${!toolchain_var:-local}
  export GOTOOLCHAIN
  mkdir -p "$wrap"
  printf 'module gangscaler.local/e2e/k8s\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n' "$k8s_version" > "$wrap/go.mod"
  local upstream
  upstream=$(cd / && go mod download -json "k8s.io/kubernetes@$k8s_version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  local m
  for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/.*#\1#p' "$upstream"); do
    (cd "$wrap" && go mod edit -replace="$m=$m@$staging_version")
  done
  (cd "$wrap" && go get "k8s.io/kubernetes/cmd/kube-apiserver@$k8s_version" \
    "k8s.io/kubernetes/cmd/kube-scheduler@$k8s_version" "k8s.io/kubernetes/cmd/kube-controller-manager@$k8s_version")
  mkdir -p "$out.tmp"
  local p=k8s.io/component-base/version
  local ld="-s -w -X $p.gitVersion=$k8s_version -X $p.gitMajor=1 -X $p.gitMinor=${minor#1.} -X $p.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version"
  (cd "$wrap" && go build -mod=mod -trimpath -ldflags "$ld" -o "$out.tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager)
  rm -rf "$out"; mv "$out.tmp" "$out"
  echo "$out"
}

build_etcd() {
  local out="$cache/etcd-$ETCD_VERSION"
  if [ -x "$out/etcd" ]; then echo "$out"; return; fi
  log "building etcd $ETCD_VERSION"
  mkdir -p "$out.tmp"
  (cd "$here/tools/etcd" && go build -mod=mod -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "$out"; mv "$out.tmp" "$out"
  echo "$out"
}

build_kwok() {
  local out="$cache/kwok-$KWOK_VERSION"
  # The harness reads kwok's stage YAMLs from the module source: make sure it is present.
  (cd / && go mod download "sigs.k8s.io/kwok@$KWOK_VERSION")
  if [ -x "$out/kwok" ]; then echo "$out"; return; fi
  log "building kwok $KWOK_VERSION"
  mkdir -p "$out.tmp"
  GOBIN="$out.tmp" go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  rm -rf "$out"; mv "$out.tmp" "$out"
  echo "$out"
}

build_helm() {
  local out="$cache/helm-$HELM_VERSION"
  if [ -x "$out/helm" ]; then echo "$out"; return; fi
  log "building helm $HELM_VERSION (cold: about 2 min on 2 cores)"
  mkdir -p "$out.tmp"
  # The ldflags upstream's Makefile sets: the version, and the Kubernetes version `helm
  # template` and `helm lint` assume without a cluster (that of helm's client-go; without them
  # helm assumes 1.20 and refuses the chart's kubeVersion).
  local gomod client_go major minor
  gomod=$(cd / && go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  client_go=$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod" | head -1)
  [ -n "$client_go" ] || { echo "no k8s.io/client-go in helm's go.mod" >&2; exit 2; }
  major=1 minor=$client_go
  local p=helm.sh/helm/v3
  local ld="-s -w -X $p/internal/version.version=$HELM_VERSION -X $p/internal/version.gitTreeState=clean"
  ld="$ld -X $p/pkg/chartutil.k8sVersionMajor=$major -X $p/pkg/chartutil.k8sVersionMinor=$minor"
  ld="$ld -X $p/pkg/lint/rules.k8sVersionMajor=$major -X $p/pkg/lint/rules.k8sVersionMinor=$minor"
  # helm's go.mod has no replace directives, so a plain go install works; -mod=mod because
  # GOFLAGS may carry -mod=readonly from the environment.
  GOBIN="$out.tmp" GOFLAGS=-mod=mod go install -trimpath -ldflags "$ld" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  rm -rf "$out"; mv "$out.tmp" "$out"
  echo "$out"
}

# build_ca VERSION: the externalgrpc cluster-autoscaler from ../shared/cluster-autoscaler/VERSION.
build_ca() {
  local version=$1 out="$cache/ca-$1"
  if [ -x "$out/cluster-autoscaler" ]; then echo "$out"; return; fi
  local src
  src=$("$here/ca-sources.sh" "$version")
  log "building cluster-autoscaler $version (externalgrpc) from $src (cold: about 2 min on 2 cores)"
  mkdir -p "$out.tmp"
  # -mod=readonly: upstream's go.mod and go.sum are used as they are and never rewritten.
  (cd "$src" && go build -mod=readonly -trimpath -tags externalgrpc -ldflags "-s -w" -o "$out.tmp/cluster-autoscaler" .)
  rm -rf "$out"; mv "$out.tmp" "$out"
  echo "$out"
}

# The Cluster API core manager (v1beta2 API), from the pinned wrapper module in tools/capi
# (its go.mod replaces sigs.k8s.io/cluster-api/api, which upstream points at a local path).
# The harness reads the CRDs from the module source (core/config/crd/bases), so the module is
# downloaded even when the binary is cached.
build_capi() {
  local out="$cache/capi-$CAPI_VERSION"
  (cd "$here/tools/capi" && go mod download "sigs.k8s.io/cluster-api@$CAPI_VERSION")
  if [ -x "$out/manager" ]; then echo "$out"; return; fi
  log "building the Cluster API core manager $CAPI_VERSION (cold: about 4 min on 2 cores)"
  mkdir -p "$out.tmp"
  (cd "$here/tools/capi" && go build -mod=readonly -trimpath -ldflags "-s -w" -o "$out.tmp/manager" sigs.k8s.io/cluster-api/core)
  rm -rf "$out"; mv "$out.tmp" "$out"
  echo "$out"
}

build_etcd
build_kwok
build_helm
build_capi
build_k8s
build_ca "$ca_version"
if [ "$legacy" = 1 ]; then build_ca "$CA_LEGACY"; fi
