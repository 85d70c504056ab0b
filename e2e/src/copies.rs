//! Waits the tests share: members' copies as wanted ([`Expected`], [`wait_copies`]), and the
//! federated object propagated too ([`wait_propagated`]), an object
//! there or gone ([`wait_present`], [`wait_absent`]), one field of a copy in every cluster
//! ([`wait_member_field`]); a ConfigMap federated to every member to prove a controller works
//! ([`federate_settings`]).

use anyhow::Context as _;
use kube::Resource;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use serde_json::Value;

use crate::{
    Federation, MEMBERS, TIMEOUT, Wait, create_federated, create_hub_namespace, dynamic_api,
    get_value, member_mismatch, placement, propagated_ok, target, wait_for,
};

/// A JSON pointer and the value wanted there (`None`: the field must be absent), as
/// [`member_mismatch`] checks them.
pub type Field<'a> = (&'a str, Option<&'a Value>);

/// One member's copy as a wait wants it: the cluster, its API, and the fields it must hold
/// besides being present and managed ([`member_mismatch`]).
pub struct Expected<'a> {
    cluster: &'a str,
    api: &'a Api<DynamicObject>,
    fields: Vec<Field<'a>>,
}

impl<'a> Expected<'a> {
    /// The copy in `cluster` (read through `api`), present and managed.
    pub fn copy(cluster: &'a str, api: &'a Api<DynamicObject>) -> Self {
        Self {
            cluster,
            api,
            fields: Vec::new(),
        }
    }

    /// ... holding each of `fields` too.
    pub fn with(mut self, fields: &[Field<'a>]) -> Self {
        self.fields.extend_from_slice(fields);
        self
    }

    /// The copies in `clusters` (name and API), each holding `fields`.
    pub fn each(
        clusters: impl IntoIterator<Item = (&'a str, &'a Api<DynamicObject>)>,
        fields: &[Field<'a>],
    ) -> Vec<Self> {
        clusters
            .into_iter()
            .map(|(cluster, api)| Self::copy(cluster, api).with(fields))
            .collect()
    }
}

/// What is not yet as `expected` in the copies named `name`, one line per cluster.
pub async fn copy_problems(name: &str, expected: &[Expected<'_>]) -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    for copy in expected {
        let found = get_value(copy.api, name).await?;
        problems.extend(member_mismatch(copy.cluster, found.as_ref(), &copy.fields));
    }
    Ok(problems)
}

/// Waits ([`TIMEOUT`]) until the copies named `name` are as `expected`.
pub async fn wait_copies(what: &str, name: &str, expected: &[Expected<'_>]) -> anyhow::Result<()> {
    wait_for(what, TIMEOUT, async || {
        Ok(Wait::all_or_pending(copy_problems(name, expected).await?))
    })
    .await
}

/// Waits ([`TIMEOUT`]) until the copies named `name` are as `expected` and the federated
/// object `name` of `hub_api` is [`propagated_ok`] for `clusters`.
pub async fn wait_propagated(
    what: &str,
    hub_api: &Api<DynamicObject>,
    name: &str,
    clusters: &[&str],
    expected: &[Expected<'_>],
) -> anyhow::Result<()> {
    wait_for(what, TIMEOUT, async || {
        let mut problems = copy_problems(name, expected).await?;
        let object = get_value(hub_api, name)
            .await?
            .with_context(|| format!("the federated object {name} disappeared"))?;
        if let Wait::Pending(problem) = propagated_ok(&object, clusters) {
            problems.push(problem);
        }
        Ok(Wait::all_or_pending(problems))
    })
    .await
}

/// Waits ([`TIMEOUT`]) until the federated object `name` of `hub_api` exists and is
/// [`propagated_ok`] for `clusters`.
pub async fn wait_federated_ok(
    what: &str,
    hub_api: &Api<DynamicObject>,
    name: &str,
    clusters: &[&str],
) -> anyhow::Result<()> {
    wait_for(what, TIMEOUT, async || {
        Ok(match get_value(hub_api, name).await? {
            Some(object) => propagated_ok(&object, clusters),
            None => Wait::Pending("absent".into()),
        })
    })
    .await
}

/// Waits ([`TIMEOUT`]) until `api` holds `name`.
pub async fn wait_present<K>(what: &str, api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    wait_for(what, TIMEOUT, async || {
        Ok(match api.get_opt(name).await? {
            Some(_) => Wait::Done(()),
            None => Wait::Pending("not there yet".into()),
        })
    })
    .await
}

/// Waits ([`TIMEOUT`]) until `api` no longer holds `name`.
pub async fn wait_absent<K>(what: &str, api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    wait_for(what, TIMEOUT, async || {
        Ok(match api.get_opt(name).await? {
            None => Wait::Done(()),
            Some(_) => Wait::Pending("still there".into()),
        })
    })
    .await
}

/// Waits ([`TIMEOUT`]) until each of `clusters` holds `namespace/name` of type `resource` with
/// `value` at JSON pointer `pointer` (the copy need not be managed).
pub async fn wait_member_field(
    fed: &Federation,
    clusters: &[&str],
    resource: &ApiResource,
    (namespace, name): (Option<&str>, &str),
    (pointer, value): (&str, &Value),
    what: &str,
) -> anyhow::Result<()> {
    wait_for(what, TIMEOUT, async || {
        let mut pending = Vec::new();
        for cluster in clusters {
            let copy = fed
                .member_object(cluster, resource, namespace, name)
                .await?;
            let found = copy.map(|c| c.pointer(pointer).cloned().unwrap_or(Value::Null));
            if found.as_ref() != Some(value) {
                pending.push(format!("{cluster}: {found:?}"));
            }
        }
        Ok(Wait::all_or_pending(pending))
    })
    .await
}

/// Namespace `namespace` on the hub, federated to [`MEMBERS`], and in it a FederatedConfigMap
/// `settings` with `data`, placed there too (how the chart and image tests prove that a
/// controller they started propagates): the hub's API of the FederatedConfigMaps there, and
/// each member's ConfigMap API in the namespace.
pub async fn federate_settings(
    hub: &kube::Client,
    env: &hubfed_testenv::TestEnv,
    namespace: &str,
    data: Value,
) -> anyhow::Result<(Api<DynamicObject>, Vec<(&'static str, Api<DynamicObject>)>)> {
    create_hub_namespace(hub, namespace).await?;
    let spec = serde_json::json!({"placement": placement(&MEMBERS)});
    create_federated(hub, "Namespace", Some(namespace), namespace, spec).await?;
    let spec = serde_json::json!({"template": {"data": data}, "placement": placement(&MEMBERS)});
    let hub_configmaps =
        create_federated(hub, "ConfigMap", Some(namespace), "settings", spec).await?;
    let configmap = target("ConfigMap");
    let mut member_apis = Vec::new();
    for member in MEMBERS {
        let client = env.cluster(member).context("member")?.client().await?;
        member_apis.push((member, dynamic_api(client, &configmap, Some(namespace))));
    }
    Ok((hub_configmaps, member_apis))
}
