//! The one mapping from engine errors to gRPC status codes. Messages carry `Display`, which
//! names the group and the numbers involved.

use tonic::codegen::http;
use tonic::{Code, Status};

use crate::engine::Error;
use crate::provision;

/// The gRPC code for an engine error.
///
/// | error | code |
/// |---|---|
/// | unknown group, unmanaged node | `NotFound` |
/// | bad delta, malformed request, node not in group | `InvalidArgument` |
/// | past max, below min, cancelling created capacity | `FailedPrecondition` |
/// | no template, no price, unsupported call | `Unimplemented` |
/// | backend unreachable, cluster view not synced or stale, not the leader, audit log unwritable | `Unavailable` |
/// | wiring bug, an increase whose task ended without an answer | `Internal` |
pub fn code(e: &Error) -> Code {
    match e {
        Error::GroupNotFound(_) | Error::NodeNotManaged { .. } => Code::NotFound,
        Error::InvalidRequest(_) => Code::InvalidArgument,
        Error::NoTemplate(_) | Error::NoPrice(_) | Error::Unsupported(_) => Code::Unimplemented,
        Error::NoBackend { .. } | Error::Interrupted { .. } => Code::Internal,
        Error::Rejected { .. } => Code::FailedPrecondition,
        Error::NotSynced(_)
        | Error::ViewStale { .. }
        | Error::NotLeader(_)
        | Error::AuditUnwritable { .. }
        | Error::WithdrawalUnrecorded { .. }
        | Error::UnappliedUnrecorded { .. } => Code::Unavailable,
        Error::Provision(p) => match p {
            provision::Error::AboveMax { .. }
            | provision::Error::BelowMin { .. }
            | provision::Error::WouldDeleteExisting { .. } => Code::FailedPrecondition,
            provision::Error::NotInGroup { .. } => Code::InvalidArgument,
            provision::Error::Unreachable { .. } | provision::Error::Backend { .. } => {
                Code::Unavailable
            }
        },
    }
}

/// The status for an engine error.
pub fn from_engine(e: &Error) -> Status {
    Status::new(code(e), crate::telemetry::chain(e))
}

/// tonic refuses a request message over the size limit (4 MiB) with `OUT_OF_RANGE`, before any
/// handler runs; gRPC's convention, which grpc-go (and so CA) follows, is `RESOURCE_EXHAUSTED`.
/// No handler of this service answers `OUT_OF_RANGE` (see [`code`]), so every trailers-only
/// `OUT_OF_RANGE` response is that size check: this rewrites it, message kept. A tower
/// response map rather than a codec because the check runs in tonic's framing, before the
/// codec sees the message. Undecodable messages keep tonic's `INTERNAL`, which is the code
/// gRPC specifies for "error parsing request protocol buffer" (grpc-go answers it too).
pub fn oversize_is_resource_exhausted<B>(mut response: http::Response<B>) -> http::Response<B> {
    let headers = response.headers_mut();
    let out_of_range = headers
        .get(GRPC_STATUS)
        .is_some_and(|v| v.as_bytes() == OUT_OF_RANGE);
    if out_of_range {
        headers.insert(
            GRPC_STATUS,
            http::HeaderValue::from_static(RESOURCE_EXHAUSTED),
        );
    }
    response
}

const GRPC_STATUS: &str = "grpc-status";
/// `Code::OutOfRange` on the wire.
const OUT_OF_RANGE: &[u8] = b"11";
/// `Code::ResourceExhausted` on the wire.
const RESOURCE_EXHAUSTED: &str = "8";

/// A bounded metric label for a code, spelt as grpc-go's `codes.Code.String()` spells it
/// (`OK`, `Canceled`), which go-grpc-prometheus puts in `grpc_code` and gRPC dashboards match.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NodeGroupId;

    #[test]
    fn every_refusal_maps_to_the_code_ca_expects() {
        let g = || NodeGroupId::new("gpu");
        let cases = [
            (Error::GroupNotFound("x".into()), Code::NotFound),
            (Error::InvalidRequest("bad".into()), Code::InvalidArgument),
            (Error::NoTemplate(g()), Code::Unimplemented),
            (Error::NoPrice(g()), Code::Unimplemented),
            (Error::Unsupported("PricingPodPrice"), Code::Unimplemented),
            (
                crate::leader::NotLeader::Standby {
                    identity: "gangscaler-1".into(),
                    leader: Some("gangscaler-0".into()),
                    lease: "kube-system/gangscaler".into(),
                }
                .into(),
                Code::Unavailable,
            ),
            (
                provision::Error::AboveMax {
                    group: g(),
                    current: 3,
                    delta: 2,
                    max: 4,
                }
                .into(),
                Code::FailedPrecondition,
            ),
            (
                provision::Error::BelowMin {
                    group: g(),
                    current: 1,
                    removing: 1,
                    min: 1,
                }
                .into(),
                Code::FailedPrecondition,
            ),
            (
                provision::Error::NotInGroup {
                    group: g(),
                    node: "n".into(),
                    provider_id: String::new(),
                }
                .into(),
                Code::InvalidArgument,
            ),
            (
                provision::Error::Backend {
                    group: g(),
                    backend: "memory",
                    message: "down".into(),
                }
                .into(),
                Code::Unavailable,
            ),
            (
                provision::Error::Unreachable {
                    group: g(),
                    backend: "kwok",
                    message: "connection refused".into(),
                }
                .into(),
                Code::Unavailable,
            ),
            (
                Error::ViewStale {
                    group: g(),
                    stale: crate::cluster::Stale {
                        kinds: vec!["Pod".into()],
                        for_: std::time::Duration::from_secs(5),
                    },
                },
                Code::Unavailable,
            ),
            (
                Error::AuditUnwritable {
                    group: g(),
                    nodes: 2,
                    why: "writing audit log /a: No space left on device (os error 28)".into(),
                },
                Code::Unavailable,
            ),
            (
                Error::WithdrawalUnrecorded {
                    group: g(),
                    instances: 2,
                    why: "writing audit log /a: No space left on device (os error 28)".into(),
                },
                Code::Unavailable,
            ),
            (
                Error::UnappliedUnrecorded {
                    group: g(),
                    scale_up: "su-1-1".into(),
                    why: "writing audit log /a: No space left on device (os error 28)".into(),
                },
                Code::Unavailable,
            ),
            (
                Error::Interrupted {
                    group: "gpu".into(),
                    why: "task 7 panicked".into(),
                },
                Code::Internal,
            ),
        ];
        for (err, want) in cases {
            assert_eq!(from_engine(&err).code(), want, "{err}");
        }
    }

    #[test]
    fn only_out_of_range_responses_become_resource_exhausted() {
        let response = |status: Status| {
            let (parts, ()) = status.into_http::<()>().into_parts();
            http::Response::from_parts(parts, ())
        };
        let code_of = |r: &http::Response<()>| {
            r.headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<i32>().ok())
                .map(Code::from_i32)
        };
        let big = oversize_is_resource_exhausted(response(Status::out_of_range(
            "Error, decoded message length too large: found 5000000 bytes, the limit is: 4194304 bytes",
        )));
        assert_eq!(code_of(&big), Some(Code::ResourceExhausted));
        assert!(
            big.headers()
                .get("grpc-message")
                .is_some_and(|m| !m.is_empty()),
            "message kept"
        );
        for kept in [
            Status::internal("failed to decode Protobuf message"),
            Status::not_found("x"),
            Status::failed_precondition("y"),
        ] {
            let code = kept.code();
            assert_eq!(
                code_of(&oversize_is_resource_exhausted(response(kept))),
                Some(code)
            );
        }
    }

    #[test]
    fn past_max_message_names_group_and_numbers() {
        let e: Error = provision::Error::AboveMax {
            group: NodeGroupId::new("h100"),
            current: 3,
            delta: 2,
            max: 4,
        }
        .into();
        let msg = from_engine(&e).message().to_owned();
        for needle in ["h100", "3", "2", "4"] {
            assert!(msg.contains(needle), "{msg:?} lacks {needle}");
        }
    }
}
