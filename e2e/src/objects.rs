//! Objects the tests create and edit: unique names, federated types and their target types,
//! dynamic APIs, federated objects and namespaces, edits (`kubectl edit`-like).

use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::Context as _;
use hubfed_api::defaulttypes::default_federated_type_configs;
use hubfed_api::federatedtypeconfig::{FederatedTypeConfig, plural_name};
use hubfed_api::names::{TYPES_GROUP, TYPES_VERSION};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use crate::{FIELD_MANAGER, KUBEFED_NAMESPACE, TIMEOUT, Wait, member_mismatch, named, wait_for};

static NAME_COUNTER: AtomicU32 = AtomicU32::new(0);

/// A name unique within this test binary (each binary has its own clusters): `<prefix>-<n>`.
/// Keep `prefix` a short DNS label.
pub fn unique_name(prefix: &str) -> String {
    let n = NAME_COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{n}")
}

/// A fresh namespace name for one test: `e2e-<prefix>-<n>`.
pub fn unique_ns(prefix: &str) -> String {
    unique_name(&format!("e2e-{prefix}"))
}

/// The `types.kubefed.io/v1beta1` type `Federated<kind>` (e.g. `federated("ConfigMap")`).
pub fn federated(kind: &str) -> ApiResource {
    let kind = format!("Federated{kind}");
    ApiResource {
        group: TYPES_GROUP.to_owned(),
        version: TYPES_VERSION.to_owned(),
        api_version: format!("{TYPES_GROUP}/{TYPES_VERSION}"),
        plural: plural_name(&kind),
        kind,
    }
}

/// The FTC of a default target kind (`ConfigMap`, `Deployment`, ...), as the harness created
/// it. Panics for other kinds: a test asking for one is wrong.
pub fn default_ftc(kind: &str) -> FederatedTypeConfig {
    default_federated_type_configs(KUBEFED_NAMESPACE)
        .into_iter()
        .find(|ftc| ftc.spec.target_type.kind == kind)
        .unwrap_or_else(|| panic!("{kind} is not a default federated type"))
}

/// The target type of a default federated kind, for reading member objects.
pub fn target(kind: &str) -> ApiResource {
    default_ftc(kind).spec.target_type.to_dynamic()
}

/// A dynamic API for `resource`: namespaced when `namespace` is given, else cluster-wide.
pub fn dynamic_api(
    client: Client,
    resource: &ApiResource,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match namespace {
        Some(namespace) => Api::namespaced_with(client, namespace, resource),
        None => Api::all_with(client, resource),
    }
}

/// An object as JSON; `None` when it does not exist.
pub async fn get_value(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<Option<Value>> {
    Ok(api
        .get_opt(name)
        .await?
        .map(serde_json::to_value)
        .transpose()?)
}

/// A federated object of type `resource` with the given `spec`.
pub fn federated_object(
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    spec: Value,
) -> DynamicObject {
    let mut object = DynamicObject::new(name, resource).data(json!({ "spec": spec }));
    object.metadata.namespace = namespace.map(str::to_owned);
    object
}

/// `spec.placement` naming exactly `clusters`.
pub fn placement(clusters: &[&str]) -> Value {
    let clusters: Vec<Value> = clusters
        .iter()
        .map(|name| json!({ "name": name }))
        .collect();
    json!({ "clusters": clusters })
}

/// Creates `Federated<kind>` `namespace/name` (or cluster-scoped `name`) on the hub with
/// `spec`; returns the API of its type in that namespace.
pub async fn create_federated(
    hub: &Client,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    spec: Value,
) -> anyhow::Result<Api<DynamicObject>> {
    let resource = federated(kind);
    let api = dynamic_api(hub.clone(), &resource, namespace);
    api.create(
        &PostParams::default(),
        &federated_object(&resource, namespace, name, spec),
    )
    .await
    .with_context(|| format!("creating Federated{kind} {name}"))?;
    Ok(api)
}

/// Creates namespace `namespace` on the `hub` (only there).
pub async fn create_hub_namespace(hub: &Client, namespace: &str) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    let object = Namespace {
        metadata: named(namespace),
        ..Default::default()
    };
    namespaces
        .create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("creating namespace {namespace} on the hub"))?;
    Ok(())
}

/// Creates namespace `namespace` on the `hub` and its FederatedNamespace placed on the
/// `members` (name, client), and waits until each of them holds the namespace, managed.
pub async fn create_federated_namespace(
    hub: &Client,
    members: &[(&str, Client)],
    namespace: &str,
) -> anyhow::Result<()> {
    create_hub_namespace(hub, namespace).await?;
    let clusters: Vec<&str> = members.iter().map(|(name, _)| *name).collect();
    create_federated(
        hub,
        "Namespace",
        Some(namespace),
        namespace,
        json!({ "placement": placement(&clusters) }),
    )
    .await?;
    wait_for(
        &format!("namespace {namespace} in {}", clusters.join(", ")),
        TIMEOUT,
        async || {
            let mut missing = Vec::new();
            for (cluster, client) in members {
                let namespaces: Api<Namespace> = Api::all(client.clone());
                let found = namespaces.get_opt(namespace).await?;
                let found = found.map(serde_json::to_value).transpose()?;
                if let Some(problem) = member_mismatch(cluster, found.as_ref(), &[]) {
                    missing.push(problem);
                }
            }
            Ok(Wait::all_or_pending(missing))
        },
    )
    .await
}

/// Reads an object, lets `change` edit its JSON and writes it back with a PUT (retrying on
/// conflicts), like `kubectl edit`. Returns the object as written.
pub async fn modify(
    api: &Api<DynamicObject>,
    name: &str,
    change: impl FnMut(&mut Value),
) -> anyhow::Result<Value> {
    modify_as(api, name, FIELD_MANAGER, change).await
}

/// [`modify`] as field manager `manager` (e.g. `kubectl-edit`, to act as a person would).
pub async fn modify_as(
    api: &Api<DynamicObject>,
    name: &str,
    manager: &str,
    mut change: impl FnMut(&mut Value),
) -> anyhow::Result<Value> {
    let mut attempts = 0;
    loop {
        let mut value = serde_json::to_value(api.get(name).await?)?;
        change(&mut value);
        let object: DynamicObject = serde_json::from_value(value)?;
        let params = PostParams {
            field_manager: Some(manager.to_owned()),
            ..Default::default()
        };
        match api.replace(name, &params, &object).await {
            Ok(written) => return Ok(serde_json::to_value(written)?),
            Err(kube::Error::Api(status)) if status.code == 409 && attempts < 10 => {
                attempts += 1;
            }
            Err(e) => return Err(e).with_context(|| format!("updating {name}")),
        }
    }
}

/// Sets the value at JSON pointer `pointer` inside `target`, creating missing objects on the
/// way (array elements must exist).
pub fn set_pointer(target: &mut Value, pointer: &str, new: Value) {
    let mut current = target;
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        if current.is_null() {
            *current = json!({});
        }
        current = match current {
            Value::Object(map) => map.entry(token).or_insert(Value::Null),
            Value::Array(items) => {
                let index: usize = token
                    .parse()
                    .unwrap_or_else(|_| panic!("{pointer}: {token} is not an array index"));
                &mut items[index]
            }
            other => panic!("{pointer}: cannot descend into {other}"),
        };
    }
    *current = new;
}

/// A pod template: one container `app` running `image`, labelled `app: <app>`.
pub fn pod_template(app: &str, image: &str) -> Value {
    json!({
        "metadata": { "labels": { "app": app } },
        "spec": { "containers": [{ "name": app, "image": image }] },
    })
}

/// The spec of a FederatedDeployment of `replicas` nginx pods labelled `app: <app>`, placed on
/// `clusters`.
pub fn deployment_spec(app: &str, replicas: i64, clusters: &[&str]) -> Value {
    json!({
        "template": {"spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": app, "image": "nginx"}]},
            },
        }},
        "placement": placement(clusters),
    })
}
