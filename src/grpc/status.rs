//! The one mapping from engine errors to gRPC status codes. Messages carry `Display`, which
//! names the group and the numbers involved.

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
/// | backend unreachable, cluster view not synced or stale | `Unavailable` |
/// | wiring bug | `Internal` |
pub fn code(e: &Error) -> Code {
    match e {
        Error::GroupNotFound(_) | Error::NodeNotManaged { .. } => Code::NotFound,
        Error::InvalidRequest(_) => Code::InvalidArgument,
        Error::NoTemplate(_) | Error::NoPrice(_) | Error::Unsupported(_) => Code::Unimplemented,
        Error::NoBackend { .. } => Code::Internal,
        Error::Rejected { .. } => Code::FailedPrecondition,
        Error::NotSynced(_) | Error::ViewStale { .. } => Code::Unavailable,
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
    Status::new(code(e), e.to_string())
}

/// A bounded metric label for a code.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "Ok",
        Code::Cancelled => "Cancelled",
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
        ];
        for (err, want) in cases {
            assert_eq!(from_engine(&err).code(), want, "{err}");
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
