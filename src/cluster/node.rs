//! What we read off a Node: its readiness, for the kwok backend and the scale-up observer.
//! Pure; depends only on `k8s-openapi`.

use k8s_openapi::api::core::v1::Node;

/// The node's `Ready` condition is True.
pub fn is_node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
