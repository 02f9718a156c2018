//! One Kubernetes object of an objects file, from its parse tree to its typed form: checked
//! for kind and apiVersion, stripped of what no plan reads, decoded with unknown fields noted.
//! What cannot be used is a [`Problem`]; the rest of the file still applies.

use crate::keys::LAST_APPLIED_ANNOTATION;
use crate::model::Loaded;
use crate::model::{KeptService, KeptSlice, Problem, ProblemKind, Subject};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use serde_json::Value;
use std::sync::Arc;

pub fn problem(object: &str, reason: String) -> Problem {
    problem_of(object, ProblemKind::Invalid, reason)
}

fn problem_of(object: &str, kind: ProblemKind, reason: String) -> Problem {
    Problem::new(Subject::FileItem(object.into()), kind, reason)
}

fn describe(item: &Value, kind: &str) -> String {
    let meta = item.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or("<unnamed>");
    match meta
        .and_then(|m| m.get("namespace"))
        .and_then(|n| n.as_str())
    {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// Decode one Kubernetes object (as JSON) into `out`: a kind of vipflow's is typed and added,
/// with each unknown field reported; a bad one is a problem and skipped; other kinds are not
/// vipflow's and are passed over. The objects file and the Kubernetes source's custom kinds
/// both come through here, so both read an object alike.
pub fn add_item(item: Value, out: &mut Loaded) {
    let kind = item
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or("")
        .to_string();
    let api = item
        .get("apiVersion")
        .and_then(|k| k.as_str())
        .unwrap_or("")
        .to_string();
    let what = describe(&item, if kind.is_empty() { "object" } else { &kind });
    if crate::metallb::is_metallb(&api) {
        let meta = item.get("metadata");
        let text = |key: &str| meta.and_then(|m| m.get(key)).and_then(Value::as_str);
        let subject =
            crate::metallb::subject(&api, &kind, text("namespace"), text("name"), text("uid"));
        if crate::metallb::reads(&api, &kind) {
            let mut item = item;
            drop_unread(&mut item, &kind);
            crate::metallb::add_item(item, &kind, &api, &subject, out);
        } else if !kind.is_empty() {
            // MetalLB's status objects and what vipflow does not read yet.
            out.problems.push(Problem::new(
                subject,
                ProblemKind::UnsupportedObject,
                format!("{api} {kind} is not read by vipflow; skipped"),
            ));
        }
        return;
    }
    let want_api = match kind.as_str() {
        "Service" | "Node" => "v1",
        "EndpointSlice" => "discovery.k8s.io/v1",
        "Subnet" => "kubeovn.io/v1",
        "VipPool" => crate::ipam::pool_object::API_VERSION,
        "BGPPeer" | "BGPAdvertisement" | "BFDProfile" => crate::bgp::objects::API_VERSION,
        "" => {
            out.problems
                .push(problem(&what, "has no kind; skipped".into()));
            return;
        }
        // Other kinds in a `kubectl get -A` dump (Endpoints, Pods, ...) are not ours.
        _ => return,
    };
    if api != want_api {
        out.problems.push(problem(
            &what,
            format!("apiVersion {api:?} is not {want_api:?}; skipped"),
        ));
        return;
    }
    let mut item = item;
    drop_unread(&mut item, &kind);
    let mut unknown = Vec::new();
    let res = match kind.as_str() {
        "Service" => decode::<core::Service>(item, &mut unknown)
            .map(|o| out.objects.services.push(Arc::new(KeptService::from(o)))),
        "Node" => {
            decode::<core::Node>(item, &mut unknown).map(|o| out.objects.nodes.push(Arc::new(o)))
        }
        // Kube-OVN's many other Subnet fields are not ours to warn about.
        "Subnet" => serde_json::from_value::<crate::model::KubeOvnSubnet>(item)
            .map(|o| out.objects.subnets.push(o))
            .map_err(|e| e.to_string()),
        "VipPool" => decode::<crate::ipam::pool_object::VipPool>(item, &mut unknown)
            .map(|o| out.objects.pools.push(o)),
        "BGPPeer" => decode::<crate::bgp::objects::BgpPeer>(item, &mut unknown)
            .map(|o| out.objects.bgp.peers.push(o)),
        "BGPAdvertisement" => decode::<crate::bgp::objects::BgpAdvertisement>(item, &mut unknown)
            .map(|o| out.objects.bgp.advertisements.push(o)),
        "BFDProfile" => decode::<crate::bgp::objects::BfdProfile>(item, &mut unknown)
            .map(|o| out.objects.bgp.bfd_profiles.push(o)),
        _ => decode::<discovery::EndpointSlice>(item, &mut unknown).map(|o| {
            out.objects
                .endpoint_slices
                .push(Arc::new(KeptSlice::from(o)))
        }),
    };
    match res {
        Ok(()) => {
            for path in unknown {
                out.problems.push(problem_of(
                    &what,
                    ProblemKind::UnknownField,
                    format!("unknown field {path} ignored"),
                ));
            }
        }
        Err(e) => out
            .problems
            .push(problem(&what, format!("invalid: {e}; skipped"))),
    }
}

/// Fields no plan reads, dropped before an item is decoded: in a `kubectl get -o yaml` dump
/// they are much of its bytes, and kept they would be held for as long as the objects are.
fn drop_unread(item: &mut Value, kind: &str) {
    if let Some(meta) = item.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove(LAST_APPLIED_ANNOTATION);
        }
    }
    // A pool's status is what vipflow (or MetalLB) wrote; the plan reads its spec.
    if (kind == "VipPool" || kind == "IPAddressPool")
        && let Some(o) = item.as_object_mut()
    {
        o.remove("status");
    }
    if kind == "Node"
        && let Some(status) = item.get_mut("status").and_then(Value::as_object_mut)
    {
        for unread in ["images", "volumesAttached", "volumesInUse"] {
            status.remove(unread);
        }
    }
}

/// `v` as a `T`, with the path of every field `T` does not know pushed to `unknown`.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    v: Value,
    unknown: &mut Vec<String>,
) -> Result<T, String> {
    // serde_ignored writes `?` for an Option level; users know the field path without it.
    serde_ignored::deserialize(v, |path| unknown.push(path.to_string().replace("?.", "")))
        .map_err(|e| e.to_string())
}
