#!/usr/bin/env bash
# Wire-conformance test of gangscaler's externalgrpc server (see conformance_test.go).
# GANGSCALER_BIN overrides the server binary (default: ../../target/debug/gangscaler).
set -euo pipefail
export GOTOOLCHAIN=local
cd "$(dirname "$0")"
GANGSCALER_BIN=${GANGSCALER_BIN:-$(realpath ../../target/debug/gangscaler)} go test -count=1 -v ./...
