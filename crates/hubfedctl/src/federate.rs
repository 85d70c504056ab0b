//! `federate TYPE NAME` (docs/kubefed-compatibility.md §3): creates `Federated<Kind>` objects from
//! existing hub objects (`--contents`: a namespace and what it holds), or converts a YAML file
//! offline (`-f`).

use std::path::Path;

use hubfed_api::federatedtypeconfig::{FederatedTypeConfig, ResourceScope};
use hubfed_api::names::NAMESPACES_FTC_NAME;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde::Deserialize;
use serde_json::Value;

use crate::cli::{FederateArgs, OutputFormat};
use crate::control_plane::list_ftcs;
use crate::enable::{EnableType, enable_type};
use crate::error::{Error, Result};
use crate::kubeconfig::Target;
use crate::ops::{self, FIELD_MANAGER};
use crate::session::Session;
use crate::template::{FederatedKind, builtin_cluster_scoped, federated_object, skip_reason};
use crate::types::resolve_enabled;

pub async fn federate(session: &mut Session<'_>, args: FederateArgs) -> Result<()> {
    if let Some(path) = &args.filename {
        return federate_file(session, path, &args);
    }
    let (Some(type_name), Some(name)) = (args.type_name.as_deref(), args.name.as_deref()) else {
        return Err(Error::Usage("give TYPE and NAME, or -f FILE".to_owned()));
    };
    let ns = session.kubefed_namespace().to_owned();
    let hub = session.hub().await?;
    let ftc = match resolve_enabled(&hub, &ns, type_name).await {
        Ok(ftc) => ftc,
        Err(Error::Refused(_)) if args.enable_type => {
            let request = EnableType {
                name: type_name,
                version: None,
                federated_group: &args.federated_group,
                federated_version: &args.federated_version,
            };
            let mut ftc = enable_type(session, &hub, &ns, &request, None, args.dry_run).await?;
            ftc.set_defaults();
            ftc
        }
        Err(e) => return Err(e),
    };
    if args.contents && !ftc.is_namespace() {
        return Err(Error::Usage(
            "--contents only applies to namespaces".to_owned(),
        ));
    }
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| hub.default_namespace.clone());

    let target = read_target(&hub, &ftc, &namespace, name).await?;
    let mut objects = vec![(
        federated_object(&target, &federated_kind(&ftc)),
        ftc.clone(),
    )];
    if args.contents {
        let ftcs = list_ftcs(&hub, &ns).await?;
        for (object, skipped, ftc) in namespace_contents(&hub, &ftcs, name).await? {
            match skipped {
                Some(reason) => session.note(format_args!(
                    "skipped {}: {reason}",
                    describe_value(&object)
                ))?,
                None => {
                    objects.push((federated_object(&object, &federated_kind(ftc)), ftc.clone()))
                }
            }
        }
    }

    if let Some(format) = args.output {
        let values: Vec<Value> = objects.into_iter().map(|(object, _)| object).collect();
        return session.print(&ops::render(&values, format)?);
    }
    for (object, ftc) in &objects {
        create(session, &hub, ftc, object, args.dry_run).await?;
    }
    Ok(())
}

fn federated_kind(ftc: &FederatedTypeConfig) -> FederatedKind {
    FederatedKind {
        api_version: ftc.spec.federated_type.api_version(),
        kind: ftc.spec.federated_type.kind.clone(),
    }
}

/// `kind ns/name` of a JSON object.
fn describe_value(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or_default().to_lowercase();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

async fn read_target(
    hub: &Target,
    ftc: &FederatedTypeConfig,
    namespace: &str,
    name: &str,
) -> Result<Value> {
    let target = &ftc.spec.target_type;
    let resource = target.to_dynamic();
    let api: Api<DynamicObject> = if target.scope == ResourceScope::Namespaced {
        Api::namespaced_with(hub.client.clone(), namespace, &resource)
    } else {
        Api::all_with(hub.client.clone(), &resource)
    };
    let object = api.get_opt(name).await.map_err(|e| hub.err(e))?;
    let object = object.ok_or_else(|| {
        let at = if target.scope == ResourceScope::Namespaced {
            format!("{namespace}/{name}")
        } else {
            name.to_owned()
        };
        Error::NotFound(format!(
            "{}: {} {at} not found",
            hub.subject,
            target.kind.to_lowercase()
        ))
    })?;
    with_type(serde_json::to_value(object), target)
}

/// Dynamic objects from a list have no `apiVersion`/`kind`; the template needs the kind.
fn with_type(
    value: Result<Value, serde_json::Error>,
    target: &hubfed_api::federatedtypeconfig::ApiResource,
) -> Result<Value> {
    let mut value = value.map_err(|e| Error::Refused(format!("cannot read an object: {e}")))?;
    if let Some(object) = value.as_object_mut() {
        object.insert("apiVersion".to_owned(), Value::from(target.api_version()));
        object.insert("kind".to_owned(), Value::from(target.kind.clone()));
    }
    Ok(value)
}

/// The objects in `namespace` of every enabled namespaced type, each with the reason it is
/// skipped, if it is.
async fn namespace_contents<'a>(
    hub: &Target,
    ftcs: &'a [FederatedTypeConfig],
    namespace: &str,
) -> Result<Vec<(Value, Option<&'static str>, &'a FederatedTypeConfig)>> {
    let mut found = Vec::new();
    let mut types: Vec<&FederatedTypeConfig> = ftcs
        .iter()
        .filter(|f| {
            f.target_namespaced() && f.metadata.name.as_deref() != Some(NAMESPACES_FTC_NAME)
        })
        .collect();
    types.sort_by_key(|f| f.metadata.name.clone());
    for ftc in types {
        let target = &ftc.spec.target_type;
        let api: Api<DynamicObject> =
            Api::namespaced_with(hub.client.clone(), namespace, &target.to_dynamic());
        let list = match api.list(&ListParams::default()).await {
            Ok(list) => list,
            Err(kube::Error::Api(status)) if status.code == 404 => continue,
            Err(e) => return Err(hub.err(e)),
        };
        for object in list.items {
            let value = with_type(serde_json::to_value(object), target)?;
            let skipped = skip_reason(&value);
            found.push((value, skipped, ftc));
        }
    }
    Ok(found)
}

async fn create(
    session: &mut Session<'_>,
    hub: &Target,
    ftc: &FederatedTypeConfig,
    object: &Value,
    dry_run: bool,
) -> Result<()> {
    let federated = &ftc.spec.federated_type;
    let resource = federated.to_dynamic();
    let namespace = object["metadata"]["namespace"].as_str();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(hub.client.clone(), ns, &resource),
        None => Api::all_with(hub.client.clone(), &resource),
    };
    let dynamic: DynamicObject = serde_json::from_value(object.clone())
        .map_err(|e| Error::Refused(format!("cannot build the federated object: {e}")))?;
    let params = PostParams {
        dry_run,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    match api.create(&params, &dynamic).await {
        Ok(_) => ops::report(session, "hub", &describe_value(object), "created", dry_run),
        Err(kube::Error::Api(status)) if status.code == 409 => Err(Error::Refused(format!(
            "{}: {} already exists",
            hub.subject,
            describe_value(object)
        ))),
        Err(e) => Err(hub.err(e)),
    }
}

/// `federate -f FILE`: every object of the file (YAML documents, `List`s unpacked) in its
/// federated form, printed; no cluster is contacted.
fn federate_file(session: &mut Session<'_>, path: &Path, args: &FederateArgs) -> Result<()> {
    let read_error = |reason: String| Error::ReadFile {
        path: path.to_owned(),
        reason,
    };
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).map_err(|e| read_error(e.to_string()))?
    } else {
        std::fs::read_to_string(path).map_err(|e| read_error(e.to_string()))?
    };
    let mut objects = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let value = Value::deserialize(document).map_err(|e| read_error(e.to_string()))?;
        match value {
            Value::Null => {}
            Value::Object(_) if value["kind"] == "List" => {
                objects.extend(value["items"].as_array().cloned().unwrap_or_default());
            }
            Value::Object(_) => objects.push(value),
            _ => return Err(read_error("a document is not an object".to_owned())),
        }
    }
    if objects.is_empty() {
        return Err(read_error("it holds no objects".to_owned()));
    }
    let api_version = format!("{}/{}", args.federated_group, args.federated_version);
    let mut federated = Vec::new();
    for mut object in objects {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        if kind.is_empty() || object["metadata"]["name"].as_str().is_none() {
            return Err(read_error(
                "every object needs a kind and metadata.name".to_owned(),
            ));
        }
        if let Some(namespace) = &args.namespace
            && object["metadata"]["namespace"].is_null()
            && !builtin_cluster_scoped(&kind)
        {
            object["metadata"]["namespace"] = Value::from(namespace.clone());
        }
        let target = FederatedKind {
            api_version: api_version.clone(),
            kind: format!("Federated{kind}"),
        };
        federated.push(federated_object(&object, &target));
    }
    let format = args.output.unwrap_or(OutputFormat::Yaml);
    session.print(&ops::render(&federated, format)?)
}
