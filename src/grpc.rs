//! The externalgrpc `CloudProvider` service: decode the request, call the [`crate::engine`],
//! encode the answer. Conversions live in [`convert`], the one error→status table in
//! [`status`]. Depends on `proto`, `engine` and `model`.

pub mod convert;
pub mod service;
pub mod status;

pub use service::Service;
