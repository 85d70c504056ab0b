//! One member's share of a key: its ServiceImport, derived Service and derived EndpointSlices
//! written, or withdrawn.

use std::collections::BTreeMap;

use hubfed_api::mcs::{self, DERIVED_SERVICE_ANNOTATION, ServiceImport, ServicePort};
use hubfed_core::mcs::{
    CONTROL_PLANE_LABEL, ImportObject, ImportSpec, ServiceImportType, derived_endpoint_slices,
    derived_service, derived_service_name, import_ips, is_derived_service,
    leftover_endpoint_slices, needs_write,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::Api;
use serde_json::{Value, json};

use super::index::Key;
use super::reconcile::Live;
use super::write::{Write, WriteFailed, apply, as_json, delete};
use crate::clusters::MemberCluster;
use crate::metrics::METRICS;

/// A member one key's import is written into: by the hub (a push member) or by its agent.
pub(super) struct Target<'a> {
    /// This control plane's identity ([`CONTROL_PLANE_LABEL`]'s value).
    pub control_plane: &'a str,
    pub cluster: &'a MemberCluster,
    /// What this control plane wrote into the member for the key, as cached.
    pub live: &'a Live,
}

/// Writes `import` (with the sources' endpoints) into the member, or withdraws the key's
/// objects from it when `import` is None.
pub(super) async fn converge(
    key: &Key,
    view: &Target<'_>,
    import: Option<&ImportSpec>,
    endpoints: &[(String, Vec<EndpointSlice>)],
) -> Result<(), WriteFailed> {
    let Some(client) = view.cluster.client.clone() else {
        return Err(WriteFailed);
    };
    match import {
        Some(import) => write_import(key, view, client, import, endpoints).await,
        None => withdraw(key, view, client).await,
    }
}

fn import_object<'a>(view: &Target<'a>, key: &'a Key, uid: Option<&'a str>) -> ImportObject<'a> {
    ImportObject {
        control_plane: view.control_plane,
        namespace: &key.0,
        name: &key.1,
        uid,
    }
}

async fn write_import(
    key: &Key,
    view: &Target<'_>,
    client: Client,
    import: &ImportSpec,
    endpoints: &[(String, Vec<EndpointSlice>)],
) -> Result<(), WriteFailed> {
    let (namespace, name) = key;
    let live_uid = view
        .live
        .import
        .as_ref()
        .and_then(|i| i.metadata.uid.clone());
    let object = import_object(view, key, live_uid.as_deref());
    let cluster_ips = write_derived_service(view, &client, import, &object).await?;
    let ips = import_ips(&import.ip_families, &cluster_ips).ips;

    let imports: Api<ServiceImport> = Api::namespaced(client.clone(), namespace);
    let live = view.live.import.as_deref().and_then(as_json);
    let body = import_body(view.control_plane, key, import, ips)?;
    let write = Write {
        cluster: view.cluster,
        kind: "ServiceImport",
        status: false,
    };
    let uid = if needs_write(live.as_ref(), &body) {
        let written = apply(&write, &imports, name, &body).await?;
        METRICS
            .mcs_imports_written
            .with_label_values(&[&view.cluster.name])
            .inc();
        written.metadata.uid
    } else {
        live_uid.clone()
    };
    let status = json!({
        "apiVersion": format!("{}/{}", mcs::GROUP, mcs::VERSION),
        "kind": "ServiceImport",
        "metadata": {"name": name, "namespace": namespace},
        "status": {"clusters": import.clusters.iter().map(|c| json!({"cluster": c}))
            .collect::<Vec<_>>()},
    });
    if needs_write(live.as_ref(), &status) {
        let write = Write {
            status: true,
            ..write
        };
        apply(&write, &imports, name, &status).await?;
    }
    let object = import_object(view, key, uid.as_deref());
    write_slices(view, client, import, &object, endpoints).await
}

/// Applies the derived Service of a ClusterSetIP import (deletes hubfed's of a Headless one);
/// returns its member-allocated `spec.clusterIPs`.
async fn write_derived_service(
    view: &Target<'_>,
    client: &Client,
    import: &ImportSpec,
    object: &ImportObject<'_>,
) -> Result<Vec<String>, WriteFailed> {
    let services: Api<Service> = Api::namespaced(client.clone(), object.namespace);
    let live = view
        .live
        .service
        .as_deref()
        .filter(|s| is_derived_service(&s.metadata, object));
    let write = Write {
        cluster: view.cluster,
        kind: "Service",
        status: false,
    };
    let Some(desired) = derived_service(import, object) else {
        if let Some(live) = live {
            delete(
                &write,
                &services,
                live.metadata.name.as_deref().unwrap_or_default(),
            )
            .await?;
        }
        return Ok(Vec::new());
    };
    let name = derived_service_name(object.namespace, object.name);
    let body = as_json(&desired).ok_or(WriteFailed)?;
    let service = if needs_write(live.and_then(as_json).as_ref(), &body) {
        apply(&write, &services, &name, &body).await?
    } else {
        live.cloned().unwrap_or_default()
    };
    Ok(service
        .spec
        .and_then(|s| s.cluster_ips.or_else(|| s.cluster_ip.map(|ip| vec![ip])))
        .unwrap_or_default())
}

/// The ServiceImport's apply body (its status is written apart).
fn import_body(
    control_plane: &str,
    key: &Key,
    import: &ImportSpec,
    ips: Vec<String>,
) -> Result<Value, WriteFailed> {
    let (namespace, name) = key;
    let annotations = (import.type_ == ServiceImportType::ClusterSetIp).then(|| {
        BTreeMap::from([(
            DERIVED_SERVICE_ANNOTATION.to_owned(),
            derived_service_name(namespace, name),
        )])
    });
    let mut object = ServiceImport {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            labels: Some(BTreeMap::from([(
                CONTROL_PLANE_LABEL.to_owned(),
                control_plane.to_owned(),
            )])),
            annotations,
            ..ObjectMeta::default()
        },
        ..ServiceImport::default()
    };
    let properties = object.properties_mut();
    properties.type_ = import.type_.as_str().to_owned();
    properties.ports = import
        .ports
        .iter()
        .map(|p| ServicePort {
            name: p.name.clone(),
            protocol: p.protocol.clone(),
            app_protocol: p.app_protocol.clone(),
            port: p.port,
        })
        .collect();
    properties.ips = ips;
    properties.session_affinity = import.session_affinity.clone().unwrap_or_default();
    properties.session_affinity_config = import.session_affinity_config.clone();
    properties.ip_families = import.ip_families.clone();
    properties.internal_traffic_policy = import.internal_traffic_policy.clone();
    properties.traffic_distribution = import.traffic_distribution.clone();
    as_json(&object).ok_or(WriteFailed)
}

/// Applies every source cluster's derived slices that differ from the cached ones and
/// deletes hubfed's slices of the import that are no longer wanted.
async fn write_slices(
    view: &Target<'_>,
    client: Client,
    import: &ImportSpec,
    object: &ImportObject<'_>,
    endpoints: &[(String, Vec<EndpointSlice>)],
) -> Result<(), WriteFailed> {
    let desired: Vec<EndpointSlice> = endpoints
        .iter()
        .flat_map(|(cluster, sources)| derived_endpoint_slices(import, object, cluster, sources))
        .collect();
    let slices: Api<EndpointSlice> = Api::namespaced(client, object.namespace);
    let live: BTreeMap<&str, &EndpointSlice> = view
        .live
        .slices
        .iter()
        .filter_map(|s| Some((s.metadata.name.as_deref()?, s.as_ref())))
        .collect();
    let write = Write {
        cluster: view.cluster,
        kind: "EndpointSlice",
        status: false,
    };
    let mut result = Ok(());
    for slice in &desired {
        let name = slice.metadata.name.as_deref().unwrap_or_default();
        let body = as_json(slice).ok_or(WriteFailed)?;
        let cached = live.get(name).and_then(|s| as_json(*s));
        if needs_write(cached.as_ref(), &body) && apply(&write, &slices, name, &body).await.is_err()
        {
            result = Err(WriteFailed);
        }
    }
    let metas = view.live.slices.iter().map(|s| &s.metadata);
    for name in leftover_endpoint_slices(metas, &desired, object) {
        if delete(&write, &slices, &name).await.is_err() {
            result = Err(WriteFailed);
        }
    }
    result
}

/// Deletes what this control plane wrote into the member for the key: slices, the derived
/// Service, the ServiceImport.
async fn withdraw(key: &Key, view: &Target<'_>, client: Client) -> Result<(), WriteFailed> {
    let object = import_object(view, key, None);
    let (namespace, name) = key;
    let mut result = Ok(());
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let write = |kind| Write {
        cluster: view.cluster,
        kind,
        status: false,
    };
    let metas = view.live.slices.iter().map(|s| &s.metadata);
    for slice in leftover_endpoint_slices(metas, &[], &object) {
        if delete(&write("EndpointSlice"), &slices, &slice)
            .await
            .is_err()
        {
            result = Err(WriteFailed);
        }
    }
    let derived = view
        .live
        .service
        .as_deref()
        .filter(|s| is_derived_service(&s.metadata, &object));
    if let Some(service) = derived {
        let services: Api<Service> = Api::namespaced(client.clone(), namespace);
        let service_name = service.metadata.name.as_deref().unwrap_or_default();
        if delete(&write("Service"), &services, service_name)
            .await
            .is_err()
        {
            result = Err(WriteFailed);
        }
    }
    if view.live.import.is_some() {
        let imports: Api<ServiceImport> = Api::namespaced(client, namespace);
        if delete(&write("ServiceImport"), &imports, name)
            .await
            .is_err()
        {
            result = Err(WriteFailed);
        }
    }
    result
}
