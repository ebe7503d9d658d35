use super::*;

#[test]
fn a_claim_reads_back_from_its_text_form_with_a_slash_in_the_gang_name() {
    for claim in [
        Claim::for_gang("su-1800000000000-3", "team-a", "train"),
        Claim::for_gang("su-1-1", "ns", "workload/pg/replica-0"),
        Claim {
            scale_up: "su-2-9".into(),
            gang: None,
        },
    ] {
        let text = claim.to_string();
        assert_eq!(Claim::parse(&text), Some(claim), "{text}");
    }
    assert_eq!(
        Claim::for_gang("su-1-1", "ns", "w/pg").to_string(),
        "su-1-1/ns/w/pg"
    );
}

#[test]
fn a_malformed_claim_is_none() {
    for bad in ["", "/ns/name", "su-1-1/ns", "su-1-1//name", "su-1-1/ns/"] {
        assert_eq!(Claim::parse(bad), None, "{bad:?}");
    }
}
