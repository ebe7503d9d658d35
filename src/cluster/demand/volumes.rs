//! A pod's volume references looked up in a snapshot: attachable volumes per CSI driver, the
//! claims whose driver cannot be known, and the claims a scale-up waits to see attached.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PersistentVolume;

use super::raw::{VolumeRef, migrated};
use crate::cluster::objects::ObjectSet;
use crate::cluster::pod::CompactPod;
use crate::cluster::problem::{ClaimCause, Issue};

/// Attachable volumes per CSI driver, and the claims whose driver cannot be resolved (each
/// also reported in `issues`).
pub(super) fn volumes(
    pod: &CompactPod,
    objects: &ObjectSet,
    issues: &mut Vec<Issue>,
) -> (BTreeMap<String, u32>, Vec<String>) {
    let namespace = pod.namespace();
    // (driver, identity): a claim or disk used by two volumes of the pod counts once.
    let mut attached: BTreeSet<(String, String)> = BTreeSet::new();
    let mut unresolved: Vec<String> = Vec::new();
    for volume in &pod.demand.volumes {
        let (claim, template_class) = match volume {
            VolumeRef::Claim(claim) => (claim, None),
            VolumeRef::Ephemeral {
                claim,
                template_class,
            } => (claim, template_class.as_ref().map(|c| c.as_deref())),
            VolumeRef::InTree { driver, identity } => {
                if attach_required(objects, driver) {
                    attached.insert(((*driver).to_owned(), format!("inline:{identity}")));
                }
                continue;
            }
        };
        match claim_driver(objects, namespace, claim, template_class) {
            Ok(Some(driver)) => {
                if attach_required(objects, &driver) {
                    attached.insert((driver, format!("pvc:{claim}")));
                }
            }
            // Bound to a volume that no CSI driver attaches (NFS, hostPath, local...).
            Ok(None) => {}
            Err(cause) => {
                if !unresolved.iter().any(|c| c.as_str() == &**claim) {
                    unresolved.push(claim.to_string());
                    issues.push(Issue::UnresolvedClaim {
                        claim: claim.to_string(),
                        cause,
                    });
                }
            }
        }
    }
    let mut counts = BTreeMap::new();
    for (driver, _) in attached {
        *counts.entry(driver).or_insert(0u32) += 1;
    }
    (counts, unresolved)
}

/// The claims of `pod` whose CSI driver needs attaching (`attachRequired` not false), each
/// with the PersistentVolume it is bound to, if it is bound yet; a claim used twice is listed
/// once. Inline in-tree disks are left out: their VolumeAttachments name a PV that migration
/// generates, which no object here carries.
pub(crate) fn attachable_claims(
    pod: &CompactPod,
    objects: &ObjectSet,
) -> Vec<(String, Option<String>)> {
    let namespace = pod.namespace();
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    for volume in &pod.demand.volumes {
        let (claim, template_class) = match volume {
            VolumeRef::Claim(claim) => (claim, None),
            VolumeRef::Ephemeral {
                claim,
                template_class,
            } => (claim, template_class.as_ref().map(|c| c.as_deref())),
            VolumeRef::InTree { .. } => continue,
        };
        if out.iter().any(|(c, _)| c.as_str() == &**claim) {
            continue;
        }
        let Ok(Some(driver)) = claim_driver(objects, namespace, claim, template_class) else {
            continue;
        };
        if !attach_required(objects, &driver) {
            continue;
        }
        let pv = objects
            .pvc(namespace, claim)
            .and_then(|pvc| pvc.spec.as_ref())
            .and_then(|s| s.volume_name.clone())
            .filter(|n| !n.is_empty());
        out.push((claim.to_string(), pv));
    }
    out
}

/// The CSI driver behind claim `namespace/claim`: the bound PV's driver (`None` for a volume
/// no CSI driver attaches), else the provisioner of its StorageClass. `template_class` stands
/// in for a claim that does not exist yet (`Some(None)`: a template without a class, which
/// gets the default class).
///
/// # Errors
///
/// Why the driver cannot be known: the claim, its bound PV or its StorageClass is missing,
/// it names no class and none is the default, or it asks for no class and is not bound.
fn claim_driver(
    objects: &ObjectSet,
    namespace: &str,
    claim: &str,
    template_class: Option<Option<&str>>,
) -> Result<Option<String>, ClaimCause> {
    let class = match objects.pvc(namespace, claim) {
        Some(pvc) => {
            let spec = pvc.spec.as_ref();
            // Once bound, the volume's own driver is what attaches, whatever the class says.
            if let Some(volume) = spec
                .and_then(|s| s.volume_name.as_deref())
                .filter(|n| !n.is_empty())
            {
                return match objects.pv(volume) {
                    Some(pv) => Ok(pv_driver(pv)),
                    None => Err(ClaimCause::VolumeNotFound {
                        volume: volume.to_owned(),
                    }),
                };
            }
            // The beta annotation predates the field and still wins when both are set.
            let annotated = pvc
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
                .map(String::as_str);
            annotated.or_else(|| spec.and_then(|s| s.storage_class_name.as_deref()))
        }
        None => template_class.ok_or(ClaimCause::ClaimNotFound)?,
    };
    let class = match class {
        // "" asks for no class: only a pre-provisioned PV can bind; its driver is unknown.
        Some("") => return Err(ClaimCause::NoClassUnbound),
        Some(name) => objects
            .storage_class(name)
            .ok_or_else(|| ClaimCause::ClassNotFound {
                class: name.to_owned(),
            })?,
        None => objects
            .default_storage_class()
            .ok_or(ClaimCause::NoDefaultClass)?,
    };
    Ok(Some(migrated(&class.provisioner).to_owned()))
}

/// The CSI driver of a PV (a migrated in-tree source counts for its CSI driver).
fn pv_driver(pv: &PersistentVolume) -> Option<String> {
    let spec = pv.spec.as_ref()?;
    if let Some(csi) = spec.csi.as_ref() {
        return Some(csi.driver.clone());
    }
    let plugin = if spec.aws_elastic_block_store.is_some() {
        "kubernetes.io/aws-ebs"
    } else if spec.gce_persistent_disk.is_some() {
        "kubernetes.io/gce-pd"
    } else if spec.azure_disk.is_some() {
        "kubernetes.io/azure-disk"
    } else if spec.cinder.is_some() {
        "kubernetes.io/cinder"
    } else if spec.vsphere_volume.is_some() {
        "kubernetes.io/vsphere-volume"
    } else {
        return None;
    };
    Some(migrated(plugin).to_owned())
}

/// `attachRequired` of the driver's CSIDriver; true without one.
fn attach_required(objects: &ObjectSet, driver: &str) -> bool {
    objects
        .csi_driver(driver)
        .and_then(|d| d.spec.attach_required)
        != Some(false)
}
