//! Cluster ids: each member's `cluster.clusterset.k8s.io` and `clusterset.k8s.io`
//! ClusterProperties, written when absent; refused members said once.

use std::collections::BTreeMap;
use std::sync::Arc;

use hubfed_api::about::{self, CLUSTER_ID_PROPERTY, CLUSTER_SET_PROPERTY, ClusterProperty};
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_core::mcs::{
    ClusterIdDecision, ClusterSetProperty, IdSource, MemberId, cluster_ids, cluster_set_property,
};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource as _;
use kube::api::Api;
use kube::runtime::events::EventType;
use serde_json::json;
use tracing::{info, warn};

use super::Context;
use super::write::{Write, apply};
use crate::clusters::MemberCluster;

/// The reason of the Event of a member whose `clusterset.k8s.io` names another ClusterSet.
const FOREIGN_CLUSTER_SET: &str = "ForeignClusterSet";

/// A member's part in the ClusterSet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Part {
    /// It takes part under `id`; the ClusterProperties hubfed is to create in it.
    Member {
        id: String,
        write_id: bool,
        write_set: bool,
    },
    /// Its Events' reason (`InvalidClusterID`, `DuplicateClusterID`, `ForeignClusterSet`:
    /// each refusal its own series, so a new one is never folded into an older one's count)
    /// and what is wrong.
    Refused {
        reason: &'static str,
        message: String,
    },
}

/// Every listed member's part, by KubeFedCluster name; members not yet listed have none.
pub(super) fn decide(
    members: &[(Arc<MemberCluster>, Arc<super::Member>)],
    cluster_set: &str,
) -> BTreeMap<String, Part> {
    struct Seen {
        name: String,
        id: Option<String>,
        set: Option<String>,
        serves: bool,
    }
    let seen: Vec<Seen> = members
        .iter()
        .filter_map(|(_, member)| {
            let index = member.index.lock();
            index.listed().then(|| Seen {
                name: member.name.clone(),
                id: index.property(CLUSTER_ID_PROPERTY).map(str::to_owned),
                set: index.property(CLUSTER_SET_PROPERTY).map(str::to_owned),
                serves: index.serves_properties(),
            })
        })
        .collect();
    let inputs: Vec<MemberId<'_>> = seen
        .iter()
        .map(|s| MemberId {
            cluster: &s.name,
            property: s.id.as_deref(),
        })
        .collect();
    let decisions = cluster_ids(&inputs);
    seen.iter()
        .filter_map(|s| {
            let part = match decisions.get(&s.name)? {
                ClusterIdDecision::Refused {
                    message, refusal, ..
                } => Part::Refused {
                    reason: refusal.as_str(),
                    message: message.clone(),
                },
                ClusterIdDecision::Member { id, source } => {
                    let set = if s.serves {
                        cluster_set_property(s.set.as_deref(), cluster_set)
                    } else {
                        ClusterSetProperty::Held
                    };
                    match set {
                        ClusterSetProperty::Refused(message) => Part::Refused {
                            reason: FOREIGN_CLUSTER_SET,
                            message,
                        },
                        set => Part::Member {
                            id: id.clone(),
                            write_id: s.serves && *source == IdSource::ClusterName,
                            write_set: set == ClusterSetProperty::Write,
                        },
                    }
                }
            };
            Some((s.name.clone(), part))
        })
        .collect()
}

/// Writes missing ClusterProperties and says each refusal once, whenever ids may have
/// changed, until shutdown.
pub(super) async fn maintain(ctx: Arc<Context>) {
    let mut said: BTreeMap<String, String> = BTreeMap::new();
    loop {
        tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            () = ctx.ids_changed.notified() => {}
        }
        let members = ctx.members();
        let parts = decide(&members, &ctx.kubefed_namespace);
        said.retain(|cluster, _| matches!(parts.get(cluster), Some(Part::Refused { .. })));
        for (cluster, member) in &members {
            match parts.get(&cluster.name) {
                Some(Part::Member {
                    id,
                    write_id,
                    write_set,
                }) if cluster.ready => {
                    let writes = [
                        (*write_id, CLUSTER_ID_PROPERTY, id.as_str()),
                        (
                            *write_set,
                            CLUSTER_SET_PROPERTY,
                            ctx.kubefed_namespace.as_str(),
                        ),
                    ];
                    for (_, name, value) in writes.into_iter().filter(|w| w.0) {
                        write_property(cluster, member, name, value).await;
                    }
                }
                Some(Part::Refused { reason, message })
                    if said.get(&cluster.name) != Some(message) =>
                {
                    refused(&ctx, &cluster.name, reason, message);
                    said.insert(cluster.name.clone(), message.clone());
                }
                _ => {}
            }
        }
    }
}

pub(super) async fn write_property(
    cluster: &MemberCluster,
    member: &super::Member,
    name: &str,
    value: &str,
) {
    let Some(client) = cluster.client.clone() else {
        return;
    };
    let api: Api<ClusterProperty> = Api::all(client);
    let body = json!({
        "apiVersion": format!("{}/{}", about::GROUP, about::VERSION),
        "kind": "ClusterProperty",
        "metadata": {"name": name},
        "spec": {"value": value},
    });
    let write = Write {
        cluster,
        kind: "ClusterProperty",
        status: false,
    };
    if apply(&write, &api, name, &body).await.is_ok() {
        info!(cluster = %member.name, property = name, value, "ClusterProperty written");
    }
}

/// Says once that `cluster` takes no part: a log line and an Event on its KubeFedCluster.
fn refused(ctx: &Context, cluster: &str, reason: &str, message: &str) {
    warn!(
        cluster,
        reason, message, "the member takes no part in multi-cluster services"
    );
    let reference = ObjectReference {
        api_version: Some(KubeFedCluster::api_version(&()).into_owned()),
        kind: Some(KubeFedCluster::kind(&()).into_owned()),
        namespace: Some(ctx.kubefed_namespace.clone()),
        name: Some(cluster.to_owned()),
        ..ObjectReference::default()
    };
    crate::events::publish(
        &ctx.hub_events,
        &reference,
        EventType::Warning,
        reason,
        message,
    );
}
