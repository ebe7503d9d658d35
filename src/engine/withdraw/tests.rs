use super::*;
use crate::audit::GangId;
use crate::audit::Phase;

fn open(id: &str, gang: Option<&str>) -> Open {
    Open {
        scale_up_id: id.into(),
        node_group: "h100".into(),
        gang: gang.map(|name| GangId {
            namespace: "ml".into(),
            name: name.into(),
            api_version: "scheduling.k8s.io/v1alpha2".into(),
            kind: "PodGroup".into(),
        }),
        nodes: 4,
        gang_nodes: 2,
        phase: Phase::Requested,
        requested_at_ms: 0,
        formed_at_ms: None,
        attached_at_ms: None,
        repair: crate::scaleup::Repair::default(),
    }
}

#[test]
fn a_claim_is_live_only_while_its_own_lifecycle_is_open() {
    let open = [open("s1", Some("a")), open("s2", None)];
    assert!(live(&Claim::for_gang("s1", "ml", "a"), &open));
    assert!(
        !live(&Claim::for_gang("s1", "ml", "b"), &open),
        "another gang of the same scale-up ended"
    );
    assert!(
        !live(&Claim::for_gang("s1", "other", "a"), &open),
        "same name, other namespace"
    );
    let bare = |id: &str| Claim {
        scale_up: id.into(),
        gang: None,
    };
    assert!(live(&bare("s1"), &open), "any lifecycle of its scale-up");
    assert!(live(&bare("s2"), &open));
    assert!(!live(&bare("s3"), &open), "no lifecycle of s3 is open");
    assert!(
        !live(&Claim::for_gang("s2", "ml", "a"), &open),
        "s2 opened no gang lifecycle"
    );
}
