//go:build tools

// Package tools pins the Cluster API core manager the e2e builds (go build
// sigs.k8s.io/cluster-api/core); nothing here is compiled into gangscaler.
package tools

import _ "sigs.k8s.io/cluster-api/core"
