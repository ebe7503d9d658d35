//! Cloud instances of a node group as the provisioning backends report them.

use std::fmt;

use serde::Serialize;

/// Lifecycle state of an instance, mirroring CA's `InstanceState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum InstanceState {
    /// Being created (or failed to create, when `error` is set).
    Creating,
    /// Running.
    Running,
    /// Being deleted.
    Deleting,
}

/// CA's instance error class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ErrorClass {
    /// Stock-out or quota: CA class 1.
    OutOfResources,
    /// Anything else: CA class 99.
    Other,
}

impl ErrorClass {
    /// The integer CA expects on the wire.
    pub fn wire_value(self) -> i32 {
        match self {
            Self::OutOfResources => 1,
            Self::Other => 99,
        }
    }
}

/// The few stable provider error codes (CA uses them as a metric label, so keep them few).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ErrorCode {
    /// No capacity of this instance type is available.
    Stockout,
    /// An account or project quota was hit.
    QuotaExceeded,
    /// Any other provisioning failure.
    ProvisioningFailed,
}

impl ErrorCode {
    /// Every code, for validation messages.
    pub const ALL: [Self; 3] = [
        Self::Stockout,
        Self::QuotaExceeded,
        Self::ProvisioningFailed,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stockout => "stockout",
            Self::QuotaExceeded => "quotaExceeded",
            Self::ProvisioningFailed => "provisioningFailed",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The CA error class of this code.
    pub fn class(self) -> ErrorClass {
        match self {
            Self::Stockout | Self::QuotaExceeded => ErrorClass::OutOfResources,
            Self::ProvisioningFailed => ErrorClass::Other,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an instance failed to be created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceError {
    /// Stable code.
    pub code: ErrorCode,
    /// Human-readable message.
    pub message: String,
}

/// One instance of a node group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Instance {
    /// Instance id; always equal to the node's `spec.providerID`.
    pub id: String,
    /// The Kubernetes node name the instance registers as.
    pub node_name: String,
    /// Lifecycle state.
    pub state: InstanceState,
    /// Set when creation failed (state is then `Creating`, as CA expects).
    pub error: Option<InstanceError>,
    /// What the instance was requested for, when its backend keeps claims (see [`Claim`]);
    /// `None` for instances requested without one or by a backend that keeps none.
    pub claim: Option<Claim>,
}

/// What an instance was requested for: the scale-up that asked for it and, when that
/// scale-up admitted gangs, the gang among them. A backend that keeps claims stores each with
/// its instance in the same atomic step that raises the target, so that nodes and failures are
/// attributed to the scale-up and gang they were requested for, also after a restart.
///
/// Its text form ([`fmt::Display`], [`Claim::parse`]) is `<scale-up>` or
/// `<scale-up>/<namespace>/<gang name>`; a scale-up id contains no `/`, a gang name may.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Claim {
    /// The scale-up id (`su-…`).
    pub scale_up: String,
    /// The gang's `(namespace, name)`, when the scale-up was for gangs.
    pub gang: Option<(String, String)>,
}

impl Claim {
    /// A claim for `gang` (namespace, name) of `scale_up`.
    pub fn for_gang(scale_up: &str, namespace: &str, name: &str) -> Self {
        Self {
            scale_up: scale_up.to_owned(),
            gang: Some((namespace.to_owned(), name.to_owned())),
        }
    }

    /// Parses the text form; `None` for an empty scale-up id, or a gang part without a
    /// namespace or a name.
    pub fn parse(s: &str) -> Option<Self> {
        let (scale_up, gang) = match s.split_once('/') {
            None => (s, None),
            Some((id, rest)) => {
                let (ns, name) = rest.split_once('/')?;
                if ns.is_empty() || name.is_empty() {
                    return None;
                }
                (id, Some((ns.to_owned(), name.to_owned())))
            }
        };
        (!scale_up.is_empty()).then(|| Self {
            scale_up: scale_up.to_owned(),
            gang,
        })
    }
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.scale_up)?;
        if let Some((ns, name)) = &self.gang {
            write!(f, "/{ns}/{name}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
