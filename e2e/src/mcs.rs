//! Multi-cluster services in the tests: members' clients, the objects a user writes (a
//! selector-less Service, its ServiceExport, a source EndpointSlice) and waits on what the
//! controller writes (ServiceExport conditions, ServiceImports, derived EndpointSlices).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use hubfed_api::mcs::{self, ServiceExport, ServiceImport};
use hubfed_core::mcs::ENDPOINTSLICE_MANAGED_BY;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::{FIELD_MANAGER, TIMEOUT, Wait, wait_for};

/// The test's members: an admin client each, by name.
pub struct Members {
    pub clients: Vec<(&'static str, Client)>,
}

impl Members {
    pub fn client(&self, member: &str) -> &Client {
        self.clients
            .iter()
            .find(|(name, _)| *name == member)
            .map(|(_, c)| c)
            .unwrap_or_else(|| panic!("no member {member}"))
    }

    pub fn api<K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>>(
        &self,
        member: &str,
        ns: &str,
    ) -> Api<K> {
        Api::namespaced(self.client(member).clone(), ns)
    }

    /// Applies `body` (a namespaced object) in `member`.
    pub async fn apply<K>(&self, member: &str, ns: &str, body: Value) -> anyhow::Result<()>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let name = body["metadata"]["name"]
            .as_str()
            .context("a name")?
            .to_owned();
        self.api::<K>(member, ns)
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .with_context(|| format!("applying {name} in {member}/{ns}"))?;
        Ok(())
    }

    pub async fn delete<K>(&self, member: &str, ns: &str, name: &str) -> anyhow::Result<()>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        self.api::<K>(member, ns)
            .delete(name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting {name} in {member}/{ns}"))?;
        Ok(())
    }

    /// A selector-less Service and its ServiceExport in `member`.
    pub async fn export(
        &self,
        member: &str,
        ns: &str,
        name: &str,
        spec: Value,
    ) -> anyhow::Result<()> {
        self.apply::<Service>(member, ns, service(name, spec))
            .await?;
        self.apply::<ServiceExport>(member, ns, service_export(name))
            .await
    }
}

pub fn service(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
}

pub fn service_export(name: &str) -> Value {
    json!({
        "apiVersion": format!("{}/{}", mcs::GROUP, mcs::VERSION),
        "kind": "ServiceExport",
        "metadata": {"name": name},
    })
}

pub fn ports(ports: &[(&str, i32)]) -> Value {
    ports
        .iter()
        .map(|(name, port)| json!({"name": name, "port": port, "protocol": "TCP"}))
        .collect()
}

/// A source EndpointSlice of Service `service`, written as a user's controller would.
pub fn source_slice(name: &str, service: &str, addresses: &[&str]) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/service-name": service,
            "endpointslice.kubernetes.io/managed-by": "e2e.hubfed.io",
        }},
        "addressType": "IPv4",
        "endpoints": addresses.iter().map(|a| json!({"addresses": [a],
            "conditions": {"ready": true}})).collect::<Vec<_>>(),
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    })
}

/// The condition `type_` of a ServiceExport as `status/reason`.
pub fn condition(export: &ServiceExport, type_: &str) -> Option<String> {
    export
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| format!("{}/{}", c.status, c.reason))
}

/// Whether condition `got` (`status/reason`) is `want`, a reason of several joined by
/// commas (`PortConflict,TypeConflict`) counting as each of them.
pub fn matches(got: &str, want: &str) -> bool {
    let (Some((status, reasons)), Some((want_status, want_reason))) =
        (got.split_once('/'), want.split_once('/'))
    else {
        return false;
    };
    status == want_status && reasons.split(',').any(|r| r == want_reason)
}

/// Waits until `member`'s ServiceExport `ns/name` has the conditions `expected`
/// (`(type, "status/reason")`).
pub async fn wait_export(
    members: &Members,
    member: &str,
    ns: &str,
    name: &str,
    expected: &[(&str, &str)],
) -> anyhow::Result<ServiceExport> {
    let api = members.api::<ServiceExport>(member, ns);
    wait_for(
        &format!("ServiceExport {member}/{ns}/{name} to be {expected:?}"),
        TIMEOUT,
        async || {
            let Some(export) = api.get_opt(name).await? else {
                return Ok(Wait::Pending("absent".into()));
            };
            let problems: Vec<String> = expected
                .iter()
                .filter_map(|(t, want)| {
                    let got = condition(&export, t);
                    let matching = got.as_deref().is_some_and(|got| matches(got, want));
                    (!matching).then(|| format!("{t}: {got:?}"))
                })
                .collect();
            if problems.is_empty() {
                Ok(Wait::Done(export))
            } else {
                Ok(Wait::Pending(problems.join(", ")))
            }
        },
    )
    .await
}

/// Waits until `check` holds of `member`'s ServiceImport `ns/name` (None: absent).
pub async fn wait_import(
    members: &Members,
    member: &str,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(Option<&ServiceImport>) -> Result<(), String>,
) -> anyhow::Result<Option<ServiceImport>> {
    let api = members.api::<ServiceImport>(member, ns);
    wait_for(
        &format!("ServiceImport {member}/{ns}/{name}: {what}"),
        TIMEOUT,
        async || {
            let import = api.get_opt(name).await?;
            Ok(match check(import.as_ref()) {
                Ok(()) => Wait::Done(import),
                Err(problem) => Wait::Pending(problem),
            })
        },
    )
    .await
}

/// The import's ports as `name/port`, sorted.
pub fn import_ports(import: &ServiceImport) -> Vec<String> {
    let mut ports: Vec<String> = import
        .properties()
        .ports
        .iter()
        .map(|p| format!("{}/{}", p.name, p.port))
        .collect();
    ports.sort();
    ports
}

pub fn import_clusters(import: &ServiceImport) -> Vec<String> {
    import
        .status
        .iter()
        .flat_map(|s| &s.clusters)
        .map(|c| c.cluster.clone())
        .collect()
}

/// The derived slices in `member` of `ns/service` from `source`, as their addresses.
pub async fn derived_addresses(
    members: &Members,
    member: &str,
    ns: &str,
    service: &str,
    source: &str,
) -> anyhow::Result<Vec<String>> {
    let selector = format!(
        "{}={service},{}={source}",
        mcs::SERVICE_NAME_LABEL,
        mcs::SOURCE_CLUSTER_LABEL
    );
    let slices = members
        .api::<EndpointSlice>(member, ns)
        .list(&ListParams::default().labels(&selector))
        .await?;
    let mut addresses = Vec::new();
    for slice in slices.items {
        let labels = slice.metadata.labels.clone().unwrap_or_default();
        let managed = labels.get("endpointslice.kubernetes.io/managed-by");
        if managed.map(String::as_str) != Some(ENDPOINTSLICE_MANAGED_BY) {
            continue;
        }
        for endpoint in slice.endpoints.unwrap_or_default() {
            addresses.extend(endpoint.addresses);
        }
    }
    addresses.sort();
    Ok(addresses)
}

/// Waits until `member`'s derived addresses of `ns/service` from `source` are `expected`;
/// returns how long it took.
pub async fn wait_derived(
    members: &Members,
    member: &str,
    ns: &str,
    service: &str,
    source: &str,
    expected: &[&str],
) -> anyhow::Result<Duration> {
    let began = Instant::now();
    wait_for(
        &format!("{member}'s derived slices of {ns}/{service} from {source} to be {expected:?}"),
        TIMEOUT,
        async || {
            let got = derived_addresses(members, member, ns, service, source).await?;
            Ok(if got == expected {
                Wait::Done(())
            } else {
                Wait::Pending(format!("{got:?}"))
            })
        },
    )
    .await?;
    Ok(began.elapsed())
}
