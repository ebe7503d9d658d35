//! [`Problem`]: something in the cluster's objects that keeps a gang or pod from being read
//! as written. Problems are data, not errors: the rest of the snapshot is still usable.

use std::fmt;

/// The object a problem is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// `apiVersion`, or `None` when the object was referenced but never seen.
    pub api_version: Option<String>,
    /// Kind, e.g. `PodGroup`.
    pub kind: String,
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    pub(crate) fn new(api_version: Option<&str>, kind: &str, namespace: &str, name: &str) -> Self {
        Self {
            api_version: api_version.map(str::to_owned),
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: if name.is_empty() {
                "<unnamed>".to_owned()
            } else {
                name.to_owned()
            },
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)?;
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)?;
        }
        match &self.api_version {
            Some(v) => write!(f, " ({v})"),
            None => Ok(()),
        }
    }
}

/// What is wrong.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Issue {
    /// Pods name this group, but no such object exists (yet): the scheduler keeps them
    /// unschedulable until it appears, so they are neither a gang nor ungrouped.
    GroupNotFound,
    /// Pods name a pod group that the (existing) Workload does not define.
    PodGroupNotInWorkload {
        /// The `spec.workloadRef.podGroup` the pods name.
        pod_group: String,
    },
    /// No adapter reads this `apiVersion`.
    UnsupportedApiVersion,
    /// The adapter for this `apiVersion` does not know this kind.
    UnsupportedKind,
    /// A field has the wrong type or shape.
    Malformed {
        /// Dotted field path.
        path: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A gang's minimum count is missing or not positive.
    InvalidMinCount {
        /// Dotted field path.
        path: String,
        /// The value found, if any.
        value: Option<i64>,
    },
    /// A scheduling policy sets neither (or both of) `basic` and `gang`.
    InvalidPolicy {
        /// Dotted field path.
        path: String,
    },
    /// A PodGroup names a parent `CompositePodGroup` that does not exist (or is not a gang):
    /// it is admitted as a gang on its own.
    ParentCompositeMissing {
        /// `spec.parentCompositePodGroupName`.
        composite: String,
    },
    /// A `CompositePodGroup` nested in another: each composite that has PodGroup children is
    /// admitted as one unit, but the outer rule over child composites is not modelled.
    CompositeNested {
        /// `spec.parentCompositePodGroupName`.
        parent: String,
    },
    /// A resource quantity does not parse; it counts as zero.
    InvalidQuantity {
        /// Dotted field path.
        path: String,
        /// The value as written.
        value: String,
    },
    /// A node-selector requirement uses an unknown operator; it matches no node.
    InvalidOperator {
        /// Dotted field path.
        path: String,
        /// The operator as written.
        operator: String,
    },
    /// The CSI driver of a pod volume's PersistentVolumeClaim cannot be resolved. The scheduler
    /// does not place the pod until it resolves, and the planner places it on no node group:
    /// counting its volumes toward no driver would under-count the nodes its gang needs.
    UnresolvedClaim {
        /// Claim name.
        claim: String,
        /// Why the driver is unknown.
        cause: ClaimCause,
    },
}

/// Why the CSI driver of a claim cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClaimCause {
    /// The claim does not exist (yet).
    ClaimNotFound,
    /// The claim is bound (`spec.volumeName`) to a PersistentVolume that does not exist.
    VolumeNotFound {
        /// `spec.volumeName`.
        volume: String,
    },
    /// The claim (or the claim template of a generic ephemeral volume) names a StorageClass
    /// that does not exist (yet).
    ClassNotFound {
        /// `spec.storageClassName` (or the beta annotation).
        class: String,
    },
    /// The claim names no StorageClass and no default StorageClass exists.
    NoDefaultClass,
    /// The unbound claim asks for no class (`storageClassName: ""`): only a pre-provisioned
    /// volume can bind it, whose driver is unknown until it does.
    NoClassUnbound,
}

impl fmt::Display for ClaimCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ClaimNotFound => f.write_str("not found"),
            Self::VolumeNotFound { volume } => {
                write!(
                    f,
                    "bound to persistentvolume {volume:?}, which is not found"
                )
            }
            Self::ClassNotFound { class } => write!(f, "storageclass {class:?} not found"),
            Self::NoDefaultClass => f.write_str("names no storageclass and none is the default"),
            Self::NoClassUnbound => f.write_str("has storageClassName \"\" and is not bound"),
        }
    }
}

impl Issue {
    /// A short, bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::GroupNotFound => "group_not_found",
            Self::PodGroupNotInWorkload { .. } => "pod_group_not_in_workload",
            Self::UnsupportedApiVersion => "unsupported_api_version",
            Self::UnsupportedKind => "unsupported_kind",
            Self::Malformed { .. } => "malformed",
            Self::InvalidMinCount { .. } => "invalid_min_count",
            Self::InvalidPolicy { .. } => "invalid_policy",
            Self::ParentCompositeMissing { .. } => "parent_composite_missing",
            Self::CompositeNested { .. } => "composite_nested",
            Self::InvalidQuantity { .. } => "invalid_quantity",
            Self::InvalidOperator { .. } => "invalid_operator",
            Self::UnresolvedClaim { .. } => "unresolved_claim",
        }
    }
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::GroupNotFound => f.write_str("referenced by pods but not found"),
            Self::PodGroupNotInWorkload { pod_group } => {
                write!(f, "has no pod group {pod_group:?} that pods reference")
            }
            Self::UnsupportedApiVersion => f.write_str("unsupported apiVersion"),
            Self::UnsupportedKind => f.write_str("unsupported kind for this apiVersion"),
            Self::Malformed { path, detail } => write!(f, "{path}: {detail}"),
            Self::InvalidMinCount { path, value: None } => write!(f, "{path} is missing"),
            Self::InvalidMinCount {
                path,
                value: Some(v),
            } => write!(f, "{path} must be positive, got {v}"),
            Self::InvalidPolicy { path } => {
                write!(f, "{path} must set exactly one of basic and gang")
            }
            Self::ParentCompositeMissing { composite } => write!(
                f,
                "spec.parentCompositePodGroupName: CompositePodGroup {composite:?} with a gang \
                 policy not found; the PodGroup is admitted as a gang on its own"
            ),
            Self::CompositeNested { parent } => write!(
                f,
                "spec.parentCompositePodGroupName: nested in CompositePodGroup {parent:?}; this \
                 composite is admitted as one unit, the rule of its parent over it is not modelled"
            ),
            Self::InvalidQuantity { path, value } => {
                write!(f, "{path}: invalid quantity {value:?}, counted as zero")
            }
            Self::InvalidOperator { path, operator } => {
                write!(f, "{path}: unknown operator {operator:?}, matches no node")
            }
            Self::UnresolvedClaim { claim, cause } => write!(
                f,
                "persistentvolumeclaim {claim:?} {cause}: its CSI driver is unknown, so no node \
                 group is planned to host the pod until it resolves"
            ),
        }
    }
}

/// A problem with one object, and the pods it keeps out of both the gangs and the ungrouped
/// list.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Problem {
    /// The object at fault (the missing group, for [`Issue::GroupNotFound`]).
    pub object: ObjectRef,
    /// What is wrong.
    pub issue: Issue,
    /// Pods (`namespace/name`) held out because of it, sorted.
    pub held_out: Vec<String>,
}

impl Problem {
    pub(crate) fn new(object: ObjectRef, issue: Issue) -> Self {
        Self {
            object,
            issue,
            held_out: Vec::new(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.issue)?;
        match self.held_out.as_slice() {
            [] => Ok(()),
            [one] => write!(f, " (holding out pod {one})"),
            many => write!(f, " (holding out {} pods: {})", many.len(), many.join(", ")),
        }
    }
}
