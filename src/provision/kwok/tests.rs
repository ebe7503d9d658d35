//! Tests of the kwok backend.

use super::background::{Logged, Streaks};
use super::state::{FailedNode, GroupRecord, PendingNode};
use super::*;
use crate::model::ErrorCode;
use crate::provision::unreachable;

/// A backend whose API server is a closed loopback port: every request fails to connect.
fn unreachable_backend() -> KwokProvisioner {
    let url: hyper::Uri = "http://127.0.0.1:1".parse().unwrap();
    let client = kube::Client::try_from(kube::Config::new(url)).unwrap();
    KwokProvisioner::new(client, KubernetesSettings::default(), "gpu.product")
}

fn instance(node: &str) -> Instance {
    Instance {
        id: provider_id(&NodeGroupId::new("g"), node),
        node_name: node.into(),
        state: InstanceState::Running,
        error: None,
        claim: None,
    }
}

#[test]
fn a_failing_step_warns_once_per_streak_and_says_when_it_recovers() {
    let mut s = Streaks::default();
    let fail = || {
        Err(Error::Unreachable {
            group: NodeGroupId::new("g"),
            backend: "kwok",
            message: "connection refused".into(),
        })
    };
    let seen: Vec<Logged> = vec![
        s.report("step", "g", fail()),
        s.report("step", "g", fail()),
        s.report("step", "other", fail()),
        s.report("step", "g", Ok(())),
        s.report("step", "g", Ok(())),
        s.report("step", "g", fail()),
    ];
    assert_eq!(
        seen,
        vec![
            Logged::Warn,
            Logged::Debug,
            Logged::Warn,
            Logged::Recovered(2),
            Logged::Quiet,
            Logged::Warn
        ]
    );
}

#[tokio::test]
async fn an_unreachable_api_server_is_answered_from_the_last_read_until_a_write_is_tried() {
    let p = unreachable_backend();
    let mut g = crate::testing::group("g", 0, 4);
    g.backend = BackendSpec::Kwok(spec(&g));
    // Nothing read yet: the failure is reported, typed as unreachable.
    let err = p.target_size(&g).await.unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains("node group g"), "{err}");

    // As if a read had succeeded before the outage.
    let writes = p.writes();
    p.remember(writes, &g.id, |k| {
        k.target = Some(3);
        k.instances = Some(vec![instance("g-a")]);
    });
    assert_eq!(p.target_size(&g).await.unwrap(), 3);
    assert_eq!(p.instances(&g).await.unwrap(), [instance("g-a")]);
    let by_name = NodeRef {
        provider_id: String::new(),
        name: "g-a".into(),
    };
    assert_eq!(p.lookup(&by_name).await.unwrap(), Some(g.id.clone()));

    // A write that fails before sending anything (reading the state failed) changes
    // nothing; one that was sent may have been applied, so memory is forgotten.
    let err = p.increase(&g, 1).await.unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err}");
    assert_eq!(p.target_size(&g).await.unwrap(), 3);
    let _ = p.forget(&g.id);
    assert!(p.target_size(&g).await.is_err());
    assert!(p.instances(&g).await.is_err());

    // A read that began before a write is not remembered.
    let before = p.writes();
    let _ = p.forget(&g.id);
    p.remember(before, &g.id, |k| k.target = Some(1));
    assert!(p.target_size(&g).await.is_err());
}

#[test]
fn refusals_are_not_outages_but_5xx_and_throttling_are() {
    let status = |code: u16| {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..kube::core::Status::default()
        }))
    };
    assert!(unreachable(&status(503)));
    assert!(unreachable(&status(500)));
    assert!(unreachable(&status(429)));
    assert!(!unreachable(&status(403)));
    assert!(!unreachable(&status(409)));
    assert!(!unreachable(&status(404)));
}

#[test]
fn provider_ids_round_trip() {
    let id = provider_id(&NodeGroupId::new("h100-8x"), "h100-8x-ab12c");
    assert_eq!(id, "kwok://h100-8x/h100-8x-ab12c");
    assert_eq!(parse_provider_id(&id), Some(("h100-8x", "h100-8x-ab12c")));
    assert_eq!(parse_provider_id("gangscaler-memory://g/g-00001"), None);
    assert_eq!(parse_provider_id("kwok://no-slash"), None);
}

#[test]
fn group_records_round_trip_through_json_and_tolerate_missing_lists() {
    let r = GroupRecord {
        target: 3,
        created: 2,
        pending: vec![PendingNode {
            name: "g-aaaaa".into(),
            due_unix_ms: 5,
            claim: Some("su-1-1/ns/train".into()),
            requested_unix_ms: Some(4),
        }],
        failed: vec![FailedNode {
            name: "g-bbbbb".into(),
            code: ErrorCode::Stockout,
            message: "m".into(),
            claim: None,
        }],
        deleting: vec![],
    };
    let text = serde_json::to_string(&r).unwrap();
    assert_eq!(serde_json::from_str::<GroupRecord>(&text).unwrap(), r);
    let minimal: GroupRecord = serde_json::from_str(r#"{"target":2}"#).unwrap();
    assert_eq!(minimal.target, 2);
    assert!(minimal.pending.is_empty());
}

#[tokio::test]
async fn an_increase_far_past_max_fails_without_a_due_time_per_requested_node() {
    // Nothing listens on port 1: every API call fails at once.
    let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let p = KwokProvisioner::new(client, KubernetesSettings::default(), "gpu");
    let g = crate::testing::group("g", 0, 4);
    // u32::MAX due times would be 32 GiB, computed before the bound was checked.
    let err = p.increase(&g, u32::MAX).await.unwrap_err();
    // The unreachable API server is the answer: the call got there without first
    // allocating a due time per requested node.
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
}

/// What the fake API server of [`a_node_with_csi_limits_is_unusable_until_its_csinode_exists`]
/// holds, and every moment the Node could take pods with no CSINode to limit them.
#[derive(Default)]
struct FakeApi {
    node: Option<serde_json::Value>,
    csinode: bool,
    unlimited: Vec<String>,
    /// How many more Node patches another writer races: just before each, it adds its
    /// own taint and bumps the resourceVersion, as the node lifecycle controller does.
    races: usize,
    /// Patches answered 409 because their resourceVersion was stale.
    conflicts: usize,
}

/// RFC 7386 merge of `patch` into `into`.
fn merge(into: &mut serde_json::Value, patch: &serde_json::Value) {
    match (into, patch) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                if v.is_null() {
                    a.remove(k);
                } else {
                    merge(a.entry(k.clone()).or_insert(serde_json::Value::Null), v);
                }
            }
        }
        (a, b) => *a = b.clone(),
    }
}

/// One request to the fake API server: Nodes (create, get, patch, patch status) and
/// CSINodes (create). After every Node write it records whether the scheduler could now
/// place pods on the Node (it has allocatable resources and no startup taint) while no
/// CSINode carries its attach limit.
async fn fake_api(
    state: std::sync::Arc<std::sync::Mutex<FakeApi>>,
    req: http::Request<kube::client::Body>,
) -> std::result::Result<http::Response<http_body_util::Full<bytes::Bytes>>, std::convert::Infallible>
{
    use http_body_util::BodyExt;
    let (parts, body) = req.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let path = parts.uri.path().to_owned();
    let method = parts.method.as_str().to_owned();
    let mut st = state.lock().unwrap();
    let not_found = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": "NotFound", "code": 404, "message": "not found"});
    let (code, out) = match (method.as_str(), path.as_str()) {
        ("POST", "/api/v1/nodes") => {
            let mut node = body;
            node["metadata"]["uid"] = serde_json::json!("uid-1");
            node["metadata"]["resourceVersion"] = serde_json::json!("1");
            st.node = Some(node.clone());
            (201, node)
        }
        ("POST", "/apis/storage.k8s.io/v1/csinodes") => {
            st.csinode = true;
            (201, body)
        }
        ("GET", p) if p.starts_with("/api/v1/nodes/") => match &st.node {
            Some(n) => (200, n.clone()),
            None => (404, not_found),
        },
        ("PATCH", p) if p.starts_with("/api/v1/nodes/") => {
            let racing = st.races > 0 && !p.ends_with("/status");
            if racing {
                st.races -= 1;
            }
            match st.node.as_mut() {
                Some(n) => {
                    let rv: u64 = n["metadata"]["resourceVersion"]
                        .as_str()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or_default();
                    if racing {
                        let taint = serde_json::json!({"key": format!("node.kubernetes.io/other-{rv}"), "effect": "NoSchedule"});
                        match n["spec"]["taints"].as_array_mut() {
                            Some(t) => t.push(taint),
                            None => n["spec"]["taints"] = serde_json::json!([taint]),
                        }
                    }
                    let rv = if racing { rv + 1 } else { rv };
                    let stale = body["metadata"]["resourceVersion"]
                        .as_str()
                        .is_some_and(|sent| sent != rv.to_string());
                    if stale {
                        n["metadata"]["resourceVersion"] = serde_json::json!(rv.to_string());
                        let conflict = serde_json::json!({"kind": "Status", "apiVersion": "v1",
                            "status": "Failure", "reason": "Conflict", "code": 409,
                            "message": "the object has been modified"});
                        st.conflicts += 1;
                        (409, conflict)
                    } else {
                        merge(n, &body);
                        n["metadata"]["resourceVersion"] = serde_json::json!((rv + 1).to_string());
                        (200, n.clone())
                    }
                }
                None => (404, not_found),
            }
        }
        _ => (404, not_found),
    };
    if method != "GET"
        && let Some(node) = &st.node
    {
        let has_resources = node["status"]["allocatable"]
            .as_object()
            .is_some_and(|a| !a.is_empty());
        let gated = node["spec"]["taints"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["key"] == CSI_STARTUP_TAINT));
        if has_resources && !gated && !st.csinode {
            st.unlimited.push(format!("{method} {path}"));
        }
    }
    let resp = http::Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            out.to_string(),
        )))
        .unwrap();
    Ok(resp)
}

/// Creates node `g-aaaaa` of a CSI-limited kwok group against the fake API server that
/// starts as `api`, and returns that server's state.
async fn create_csi_limited_node(api: FakeApi) -> std::sync::Arc<std::sync::Mutex<FakeApi>> {
    create_csi_limited_node_with(api, crate::model::ReservationSpec::default()).await
}

/// [`create_csi_limited_node`] of a group with `reservation`.
async fn create_csi_limited_node_with(
    api: FakeApi,
    reservation: crate::model::ReservationSpec,
) -> std::sync::Arc<std::sync::Mutex<FakeApi>> {
    let state = std::sync::Arc::new(std::sync::Mutex::new(api));
    let shared = state.clone();
    let service = tower::service_fn(move |req| fake_api(shared.clone(), req));
    let client = kube::Client::new(service, "default");
    let p = KwokProvisioner::new(client, KubernetesSettings::default(), "gpu.product");
    let mut g = crate::testing::group("g", 0, 4);
    g.csi = BTreeMap::from([("ebs.csi.aws.com".to_owned(), 4)]);
    g.backend = BackendSpec::Kwok(spec(&g));
    g.reservation = reservation;

    let due = PendingNode {
        name: "g-aaaaa".into(),
        due_unix_ms: 2_000,
        claim: Some("su-1-1/ns/train".into()),
        requested_unix_ms: Some(1_000),
    };
    p.create_node(&g, &due).await.unwrap();
    state
}

#[tokio::test]
async fn a_created_node_says_what_and_when_it_was_requested_for() {
    let state = create_csi_limited_node(FakeApi::default()).await;
    let node = state.lock().unwrap().node.clone().unwrap();
    let annotations = &node["metadata"]["annotations"];
    assert_eq!(
        annotations[crate::model::labels::REQUESTED_FOR],
        "su-1-1/ns/train"
    );
    assert_eq!(annotations[crate::model::labels::REQUESTED_AT], "1000");
}

#[tokio::test]
async fn a_reserving_groups_node_registers_unassigned_and_keeps_it_through_the_csi_lift() {
    use crate::model::reservation::{RESERVATION_TAINT, UNASSIGNED};
    let on = crate::model::ReservationSpec {
        enabled: true,
        ..crate::model::ReservationSpec::default()
    };
    let state = create_csi_limited_node_with(FakeApi::default(), on).await;
    let taints = state.lock().unwrap().node.as_ref().unwrap()["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let reserved: Vec<_> = taints
        .iter()
        .filter(|t| t["key"] == RESERVATION_TAINT)
        .collect();
    assert_eq!(reserved.len(), 1, "{taints:?}");
    assert_eq!(reserved[0]["value"], UNASSIGNED);
    assert_eq!(reserved[0]["effect"], "NoSchedule");
    assert!(
        taints.iter().all(|t| t["key"] != CSI_STARTUP_TAINT),
        "{taints:?}"
    );
    // Without reservation, no such taint.
    let state = create_csi_limited_node(FakeApi::default()).await;
    let st = state.lock().unwrap();
    let node = st.node.as_ref().unwrap();
    assert!(
        node["spec"]["taints"]
            .as_array()
            .is_none_or(|t| t.iter().all(|t| t["key"] != RESERVATION_TAINT)),
        "{node}"
    );
}

#[tokio::test]
async fn a_node_with_csi_limits_is_unusable_until_its_csinode_exists() {
    let state = create_csi_limited_node(FakeApi::default()).await;

    let st = state.lock().unwrap();
    assert!(st.csinode, "the CSINode was created");
    assert!(
        st.unlimited.is_empty(),
        "the Node was usable with no CSINode after: {:?}",
        st.unlimited
    );
    let node = st.node.as_ref().unwrap();
    let taints = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        taints.iter().all(|t| t["key"] != CSI_STARTUP_TAINT),
        "the startup taint is lifted once the CSINode exists: {taints:?}"
    );
    assert!(
        node["status"]["allocatable"]["cpu"].is_string(),
        "the Node has its capacity: {node}"
    );
}

#[tokio::test]
async fn a_concurrent_change_to_the_node_does_not_fail_the_taint_lift_or_lose_its_taint() {
    let state = create_csi_limited_node(FakeApi {
        races: 3,
        ..FakeApi::default()
    })
    .await;

    let st = state.lock().unwrap();
    assert_eq!(st.conflicts, 3, "every raced patch was refused as stale");
    let taints: Vec<String> = st.node.as_ref().unwrap()["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|t| t["key"].as_str().map(str::to_owned))
        .collect();
    assert!(
        !taints.iter().any(|k| k == CSI_STARTUP_TAINT),
        "the startup taint was lifted: {taints:?}"
    );
    assert_eq!(
        taints.len(),
        3,
        "the other writer's taints were kept: {taints:?}"
    );
}

#[test]
fn random_suffixes_are_short_dns_safe_and_vary() {
    let a: BTreeSet<String> = (0..50).map(|_| random_suffix()).collect();
    assert!(a.len() > 40, "suffixes should rarely collide: {a:?}");
    assert!(a.iter().all(|s| {
        s.len() == 5
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    }));
}
