//! Admission webhooks through a real kube-apiserver: invalid FederatedTypeConfigs,
//! KubeFedClusters, KubeFedConfigs, federated objects, PlacementPolicies and the multi-cluster
//! DNS kinds (Domain, ServiceDNSRecord, IngressDNSRecord) are refused with a readable message;
//! valid ones pass; KubeFedConfig is defaulted; new federated objects get the sync finalizer
//! when their type's sync controller runs; with the validating webhook of federated objects
//! unreachable, only changes of spec wait for it.
//!
//! The webhook server runs in-process with a certificate for 127.0.0.1; the webhook
//! configurations call it by URL. Its own test binary: the configurations apply to the whole
//! hub.

use anyhow::Context;
use hubfed_api::federatedcrd::{FederatedTypeDescription, federated_crd};
use hubfed_api::federatedtypeconfig::FederatedTypeConfig;
use hubfed_api::names::SYNC_CONTROLLER_FINALIZER;
use hubfed_controller::metrics::METRICS;
use hubfed_e2e::webhooks::{
    core_api, federated_validation_hook, free_port, refusal, with_webhooks,
};
use hubfed_e2e::{
    ExampleType, KUBEFED_NAMESPACE, TIMEOUT, Wait, federated, federated_object, install_crds,
    placement, propagated_ok, wait_for,
};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[tokio::test]
async fn federated_type_configs_are_validated() -> anyhow::Result<()> {
    let federation = with_webhooks().await?;
    let api = core_api(
        federation.hub().await?,
        "FederatedTypeConfig",
        "federatedtypeconfigs",
    );
    let valid = json!({
        "apiVersion": "core.kubefed.io/v1beta1", "kind": "FederatedTypeConfig",
        "metadata": {"name": "widgets.example.io", "namespace": KUBEFED_NAMESPACE},
        "spec": {
            "targetType": {"group": "example.io", "version": "v1", "kind": "Widget", "pluralName": "widgets", "scope": "Namespaced"},
            "federatedType": {"group": "types.kubefed.io", "version": "v1beta1", "kind": "FederatedWidget", "pluralName": "federatedwidgets", "scope": "Namespaced"},
            "propagation": "Enabled",
        },
    });
    assert_eq!(
        refusal(&api, valid.clone(), true).await?,
        None,
        "a valid FTC passes"
    );

    let mut misnamed = valid.clone();
    misnamed["metadata"]["name"] = json!("gadgets.example.io");
    let message = refusal(&api, misnamed, true)
        .await?
        .expect("a misnamed FTC is refused");
    assert!(
        message.contains("metadata.name") || message.contains("widgets.example.io"),
        "{message}"
    );

    let mut bad_group = valid;
    bad_group["spec"]["federatedType"]["group"] = json!("nodots");
    let message = refusal(&api, bad_group, true)
        .await?
        .expect("a federated group without a dot is refused");
    assert!(message.contains("spec.federatedType.group"), "{message}");
    Ok(())
}

#[tokio::test]
async fn kubefed_clusters_are_validated() -> anyhow::Result<()> {
    let federation = with_webhooks().await?;
    let api = core_api(federation.hub().await?, "KubeFedCluster", "kubefedclusters");
    let valid = json!({
        "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedCluster",
        "metadata": {"name": "webhook-probe", "namespace": KUBEFED_NAMESPACE},
        "spec": {"apiEndpoint": "https://10.0.0.1:6443", "secretRef": {"name": "webhook-probe-secret"}},
    });
    assert_eq!(
        refusal(&api, valid.clone(), true).await?,
        None,
        "a valid KubeFedCluster passes"
    );

    let mut ftp = valid.clone();
    ftp["spec"]["apiEndpoint"] = json!("ftp://10.0.0.1:6443");
    let message = refusal(&api, ftp, true)
        .await?
        .expect("an ftp endpoint is refused");
    assert!(message.contains("spec.apiEndpoint"), "{message}");

    let mut mixed = valid;
    mixed["spec"]["disabledTLSValidations"] = json!(["*", "SubjectName"]);
    let message = refusal(&api, mixed, true)
        .await?
        .expect("'*' with others is refused");
    assert!(message.contains("spec.disabledTLSValidations"), "{message}");
    Ok(())
}

#[tokio::test]
async fn kubefed_configs_are_defaulted_and_validated() -> anyhow::Result<()> {
    let federation = with_webhooks().await?;
    let hub = federation.hub().await?;
    let namespace = hubfed_e2e::unique_ns("webhook-config");
    federation.create_hub_namespace(&namespace).await?;
    let gvk = kube::api::GroupVersionKind::gvk("core.kubefed.io", "v1beta1", "KubeFedConfig");
    let resource = kube::discovery::ApiResource::from_gvk_with_plural(&gvk, "kubefedconfigs");
    let api: Api<DynamicObject> = Api::namespaced_with(hub, &namespace, &resource);

    // Defaulting: a bare spec comes back complete.
    let bare: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedConfig",
        "metadata": {"name": "kubefed", "namespace": namespace},
        "spec": {"scope": "Cluster"},
    }))?;
    let created = api.create(&PostParams::default(), &bare).await?;
    let spec = &created.data["spec"];
    assert_eq!(
        spec["controllerDuration"]["availableDelay"],
        json!("20s"),
        "{spec}"
    );
    assert_eq!(
        spec["clusterHealthCheck"]["failureThreshold"],
        json!(3),
        "{spec}"
    );
    assert_eq!(
        spec["syncController"]["adoptResources"],
        json!("Enabled"),
        "{spec}"
    );

    // Validation: leaseDuration must exceed renewDeadline.
    let bad = json!({
        "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedConfig",
        "metadata": {"name": "other", "namespace": namespace},
        "spec": {"scope": "Cluster", "leaderElect": {"leaseDuration": "5s", "renewDeadline": "10s", "retryPeriod": "2s"}},
    });
    let message = refusal(&api, bad, true)
        .await?
        .expect("leaseDuration <= renewDeadline is refused");
    assert!(message.contains("spec.leaderElect"), "{message}");

    // Scope is immutable.
    let mut changed = created.clone();
    changed.data["spec"]["scope"] = json!("Namespaced");
    let refused = api
        .replace("kubefed", &PostParams::default(), &changed)
        .await
        .expect_err("changing the scope is refused");
    assert!(refused.to_string().contains("spec.scope"), "{refused}");
    Ok(())
}

#[tokio::test]
async fn federated_objects_with_bad_overrides_are_refused() -> anyhow::Result<()> {
    let federation = with_webhooks().await?;
    let hub = federation.hub().await?;
    let namespace = hubfed_e2e::unique_ns("webhook-federated");
    federation.create_hub_namespace(&namespace).await?;
    let resource = federated("ConfigMap");
    let api: Api<DynamicObject> = Api::namespaced_with(hub, &namespace, &resource);
    let object = |overrides: Value| {
        let mut o = federated_object(
            &resource,
            Some(&namespace),
            "webhook-probe",
            json!({
                "template": {"data": {"a": "b"}},
                "placement": placement(&["member1"]),
                "overrides": overrides,
            }),
        );
        o.types = Some(kube::api::TypeMeta {
            api_version: resource.api_version.clone(),
            kind: resource.kind.clone(),
        });
        serde_json::to_value(o).expect("serializable")
    };
    // The webhook server runs in this process: its answers are counted here. Other tests of
    // this binary may add to the counts, never take from them.
    let answered = |verdict: &str| {
        METRICS
            .webhook_requests_total
            .with_label_values(&["validate-federated", verdict])
            .get()
    };
    let (allowed_before, denied_before) = (answered("allowed"), answered("denied"));
    assert_eq!(
        refusal(&api, object(json!([{"clusterName": "member1", "clusterOverrides": [{"path": "/data/a", "value": "c"}]}])), true).await?,
        None,
        "a valid override passes"
    );
    let message = refusal(
        &api,
        object(json!([{"clusterName": "member1", "clusterOverrides": [{"path": "/metadata/name", "value": "x"}]}])),
        true,
    )
    .await?
    .expect("overriding /metadata/name is refused");
    assert!(message.contains("/metadata/name"), "{message}");
    assert!(
        message.contains("spec.overrides[0].clusterOverrides[0].path"),
        "{message}"
    );

    let message = refusal(
        &api,
        object(json!([
            {"clusterName": "member1", "clusterOverrides": [{"path": "/data/a", "value": "c"}]},
            {"clusterName": "member1", "clusterOverrides": [{"path": "/data/b", "value": "d"}]},
        ])),
        true,
    )
    .await?
    .expect("a cluster listed twice is refused");
    assert!(message.contains("member1"), "{message}");

    // Updates are judged too when they change overrides (or placement), with the same words.
    let created: DynamicObject = serde_json::from_value(object(json!([])))?;
    api.create(&PostParams::default(), &created).await?;
    let bad_update = api
        .patch(
            "webhook-probe",
            &PatchParams::default().dry_run(),
            &Patch::Merge(json!({"spec": {"overrides": [{"clusterName": "member1",
                "clusterOverrides": [{"path": "/metadata/name", "value": "x"}]}]}})),
        )
        .await;
    assert!(
        matches!(&bad_update, Err(kube::Error::Api(e))
            if e.message.contains("spec.overrides[0].clusterOverrides[0].path")),
        "{bad_update:?}"
    );
    assert!(
        answered("allowed") > allowed_before && answered("denied") >= denied_before + 3,
        "hubfed_webhook_requests_total of validate-federated: allowed {allowed_before} → {}, \
         denied {denied_before} → {} (one allowed and three denied reviews were sent)",
        answered("allowed"),
        answered("denied")
    );
    let timed = METRICS
        .webhook_duration
        .with_label_values(&["validate-federated"])
        .get_sample_count();
    assert!(timed >= 4, "{timed} reviews of validate-federated timed");
    Ok(())
}

#[tokio::test]
async fn placement_policies_are_validated() -> anyhow::Result<()> {
    let federation = with_webhooks().await?;
    let hub = federation.hub().await?;
    let namespace = hubfed_e2e::unique_ns("webhook-policy");
    federation.create_hub_namespace(&namespace).await?;
    let resource = kube::api::ApiResource {
        group: "scheduling.hubfed.io".into(),
        version: "v1alpha1".into(),
        api_version: "scheduling.hubfed.io/v1alpha1".into(),
        kind: "PlacementPolicy".into(),
        plural: "placementpolicies".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(hub, &namespace, &resource);
    let policy = |spec: Value| {
        json!({
            "apiVersion": "scheduling.hubfed.io/v1alpha1",
            "kind": "PlacementPolicy",
            "metadata": {"name": "probe", "namespace": namespace},
            "spec": spec,
        })
    };
    assert_eq!(
        refusal(&api, policy(json!({"targetKind": "FederatedDeployment", "maxClusters": 2, "spread": [{"topologyKey": "region", "maxPerValue": 1}]})), true).await?,
        None,
        "a valid policy passes"
    );
    let message = refusal(
        &api,
        policy(json!({"targetKind": "FederatedDeployment", "spread": [{"topologyKey": "region", "maxPerValue": 1, "minPerValue": 3}]})),
        true,
    )
    .await?
    .expect("minPerValue above maxPerValue is refused");
    assert!(
        message.contains("PlacementPolicy \"probe\" is invalid: spec.spread[0].minPerValue: Invalid value: 3: must not exceed maxPerValue (1)"),
        "{message}"
    );
    let message = refusal(
        &api,
        policy(json!({"targetKind": "FederatedDeployment", "preferences": [{"weight": 10, "clusterSelector": {"matchExpressions": [{"key": "tier", "operator": "Sometimes"}]}}]})),
        true,
    )
    .await?
    .expect("an invalid selector is refused");
    assert!(
        message.contains("spec.preferences[0].clusterSelector"),
        "{message}"
    );
    Ok(())
}

#[tokio::test]
async fn multicluster_dns_objects_are_validated() -> anyhow::Result<()> {
    let federation = with_webhooks().await?;
    let hub = federation.hub().await?;
    install_crds(&hub, &hubfed_api::multiclusterdns::crds()?).await?;
    let namespace = hubfed_e2e::unique_ns("webhook-dns");
    federation.create_hub_namespace(&namespace).await?;
    let api = |kind: &str, plural: &str| {
        let resource = kube::api::ApiResource {
            group: "multiclusterdns.kubefed.io".into(),
            version: "v1alpha1".into(),
            api_version: "multiclusterdns.kubefed.io/v1alpha1".into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        Api::<DynamicObject>::namespaced_with(hub.clone(), &namespace, &resource)
    };
    let object = |kind: &str, body: Value| {
        let mut object = json!({
            "apiVersion": "multiclusterdns.kubefed.io/v1alpha1",
            "kind": kind,
            "metadata": {"name": "probe", "namespace": namespace},
        });
        if let (Some(object), Value::Object(body)) = (object.as_object_mut(), body) {
            object.extend(body);
        }
        object
    };

    let domains = api("Domain", "domains");
    assert_eq!(
        refusal(
            &domains,
            object(
                "Domain",
                json!({"domain": "example.com", "nameServer": "ns1.example.com"})
            ),
            true
        )
        .await?,
        None,
        "a valid Domain passes"
    );
    let message = refusal(&domains, object("Domain", json!({"domain": ""})), true)
        .await?
        .expect("a Domain with an empty domain is refused");
    assert!(
        message.contains("Domain \"probe\" is invalid: domain: Required value"),
        "{message}"
    );
    let message = refusal(
        &domains,
        object("Domain", json!({"domain": "Example_com"})),
        true,
    )
    .await?
    .expect("a Domain that is no DNS name is refused");
    assert!(
        message.contains("domain: Invalid value: \"Example_com\""),
        "{message}"
    );

    let services = api("ServiceDNSRecord", "servicednsrecords");
    let record = |spec: Value| object("ServiceDNSRecord", json!({ "spec": spec }));
    // A domainRef that names no Domain is admitted: the DNS controller reports it.
    assert_eq!(
        refusal(
            &services,
            record(json!({"domainRef": "no-such-domain", "recordTTL": 300, "dnsPrefix": "shop"})),
            true
        )
        .await?,
        None,
        "a valid ServiceDNSRecord passes"
    );
    let message = refusal(
        &services,
        record(json!({"domainRef": "zone", "dnsPrefix": "shop.eu"})),
        true,
    )
    .await?
    .expect("a dnsPrefix that is not a DNS label is refused");
    assert!(
        message.contains("ServiceDNSRecord \"probe\" is invalid: spec.dnsPrefix: Invalid value: \"shop.eu\": must be one DNS label"),
        "{message}"
    );
    let message = refusal(
        &services,
        record(json!({"domainRef": "", "recordTTL": -1})),
        true,
    )
    .await?
    .expect("an empty domainRef and a negative TTL are refused");
    assert!(
        message.contains("spec.domainRef: Required value")
            && message.contains("spec.recordTTL: Invalid value: -1"),
        "{message}"
    );

    let ingresses = api("IngressDNSRecord", "ingressdnsrecords");
    let record = |spec: Value| object("IngressDNSRecord", json!({ "spec": spec }));
    assert_eq!(
        refusal(
            &ingresses,
            record(json!({"hosts": ["www.example.com", "*.apps.example.com"], "recordTTL": 60})),
            true
        )
        .await?,
        None,
        "a valid IngressDNSRecord passes"
    );
    let message = refusal(
        &ingresses,
        record(json!({"hosts": ["www.example.com", "web_1.example.com"]})),
        true,
    )
    .await?
    .expect("a host that is no DNS name is refused");
    assert!(
        message.contains("IngressDNSRecord \"probe\" is invalid: spec.hosts[1]: Invalid value: \"web_1.example.com\""),
        "{message}"
    );
    Ok(())
}

fn has_sync_finalizer(object: &DynamicObject) -> bool {
    object
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == SYNC_CONTROLLER_FINALIZER))
}

/// A federated object created while its type's sync controller runs carries the sync
/// finalizer from the write that creates it (the create's answer has it, before any controller
/// has seen the object), keeps finalizers of its own beside it, propagates and is deleted with
/// its copies; an object of a type no FederatedTypeConfig names gets none and is deleted at
/// once.
#[tokio::test]
async fn new_federated_objects_get_the_sync_finalizer_at_admission() -> anyhow::Result<()> {
    let federation = with_webhooks().await?;
    let hub = federation.hub().await?;
    let namespace = hubfed_e2e::unique_ns("webhook-finalizer");
    federation
        .create_federated_namespace(&namespace, &["member1"])
        .await?;
    let resource = federated("ConfigMap");
    let api: Api<DynamicObject> = Api::namespaced_with(hub.clone(), &namespace, &resource);
    let object = |resource: &kube::api::ApiResource, name: &str| {
        let mut o = federated_object(
            resource,
            Some(&namespace),
            name,
            json!({"template": {"data": {"a": "b"}}, "placement": placement(&["member1"])}),
        );
        o.types = Some(kube::api::TypeMeta {
            api_version: resource.api_version.clone(),
            kind: resource.kind.clone(),
        });
        o
    };
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    // The webhook reads the FTCs from a watch of its own, filled once it has started.
    wait_for(
        "a dry-run create to get the sync finalizer",
        TIMEOUT,
        async || {
            let created = api.create(&dry_run, &object(&resource, "probe")).await?;
            Ok(if has_sync_finalizer(&created) {
                Wait::Done(())
            } else {
                Wait::Pending(format!("finalizers {:?}", created.metadata.finalizers))
            })
        },
    )
    .await?;

    let created = api
        .create(&PostParams::default(), &object(&resource, "admitted"))
        .await?;
    assert!(
        has_sync_finalizer(&created),
        "the create's answer carries the sync finalizer: {:?}",
        created.metadata.finalizers
    );
    let mut own = object(&resource, "own-finalizer");
    own.metadata.finalizers = Some(vec!["example.com/keep".to_owned()]);
    let created_own = api.create(&dry_run, &own).await?;
    assert_eq!(
        created_own.metadata.finalizers,
        Some(vec![
            "example.com/keep".to_owned(),
            SYNC_CONTROLLER_FINALIZER.to_owned()
        ]),
        "a finalizer of the user's own is kept"
    );

    let copies: Api<ConfigMap> = Api::namespaced(federation.client("member1").await?, &namespace);
    wait_for("the copy in member1", TIMEOUT, async || {
        let object = serde_json::to_value(api.get("admitted").await?)?;
        Ok(match propagated_ok(&object, &["member1"]) {
            Wait::Done(()) if copies.get_opt("admitted").await?.is_some() => Wait::Done(()),
            Wait::Done(()) => Wait::Pending("no copy in member1".into()),
            Wait::Pending(p) => Wait::Pending(p),
        })
    })
    .await?;
    api.delete("admitted", &Default::default()).await?;
    wait_for("the object and its copy deleted", TIMEOUT, async || {
        let hub_left = api.get_opt("admitted").await?.is_some();
        let copy_left = copies.get_opt("admitted").await?.is_some();
        Ok(if hub_left || copy_left {
            Wait::Pending(format!("in the hub: {hub_left}, in member1: {copy_left}"))
        } else {
            Wait::Done(())
        })
    })
    .await?;

    // A type of the group that no FederatedTypeConfig names: nobody would release a finalizer.
    let gadget = ExampleType::new("Gadget", "gadgets")?;
    let ftc = FederatedTypeConfig::for_target(gadget.target.clone(), KUBEFED_NAMESPACE);
    let description = FederatedTypeDescription::for_ftc(&ftc, &[], false);
    install_crds(&hub, &[federated_crd(&description, None)?]).await?;
    let unsynced = federated("Gadget");
    let unsynced_api: Api<DynamicObject> = Api::namespaced_with(hub, &namespace, &unsynced);
    let created = unsynced_api
        .create(&PostParams::default(), &object(&unsynced, "no-ftc"))
        .await?;
    assert_eq!(
        created.metadata.finalizers, None,
        "no finalizer for a type no sync controller runs for"
    );
    unsynced_api.delete("no-ftc", &Default::default()).await?;
    assert!(
        unsynced_api.get_opt("no-ftc").await?.is_none(),
        "deleted at once"
    );
    Ok(())
}

/// With no replica answering the validating webhook of federated objects (failing closed),
/// only what it judges waits: a change of `spec` is refused, while label, annotation and
/// finalizer changes go through and a deletion completes — the chart's `matchConditions` keep
/// the API server from calling it for those. The unreachable webhook is registered for this
/// test's namespace only.
#[tokio::test]
async fn only_judged_spec_changes_wait_for_an_unreachable_validating_webhook() -> anyhow::Result<()>
{
    let federation = with_webhooks().await?;
    let hub = federation.hub().await?;
    let namespace = hubfed_e2e::unique_ns("webhook-unreachable");
    federation
        .create_federated_namespace(&namespace, &["member1"])
        .await?;
    let resource = federated("ConfigMap");
    let api: Api<DynamicObject> = Api::namespaced_with(hub.clone(), &namespace, &resource);
    let mut object = federated_object(
        &resource,
        Some(&namespace),
        "held",
        json!({"template": {"data": {"a": "b"}}, "placement": placement(&["member1"])}),
    );
    object.metadata.finalizers = Some(vec!["example.com/keep".to_owned()]);
    api.create(&PostParams::default(), &object).await?;
    let copies: Api<ConfigMap> = Api::namespaced(federation.client("member1").await?, &namespace);
    wait_for("the copy in member1", TIMEOUT, async || {
        Ok(match copies.get_opt("held").await? {
            Some(_) => Wait::Done(()),
            None => Wait::Pending("no copy in member1".into()),
        })
    })
    .await?;

    // Nothing listens on this port: every call fails, and the hook fails closed.
    let mut unreachable = federated_validation_hook(free_port()?, "");
    unreachable["clientConfig"] = json!({"url": unreachable["clientConfig"]["url"]});
    unreachable["namespaceSelector"] =
        json!({"matchLabels": {"kubernetes.io/metadata.name": namespace}});
    let configs = Api::<ValidatingWebhookConfiguration>::all(hub.clone());
    let config_name = format!("hubfed-e2e-unreachable-{namespace}");
    configs
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": config_name},
                "webhooks": [unreachable],
            }))?,
        )
        .await?;
    let merge = |patch: Value| Patch::Merge(patch);
    // The API server picks the configuration up from a watch of its own.
    let refused = wait_for("a change of placement refused", TIMEOUT, async || {
        let change = merge(json!({"spec": {"placement": placement(&["member1", "member2"])}}));
        Ok(
            match api
                .patch("held", &PatchParams::default().dry_run(), &change)
                .await
            {
                Err(kube::Error::Api(e)) => Wait::Done(e.message),
                Err(e) => return Err(e.into()),
                Ok(_) => Wait::Pending("the change of spec was accepted".into()),
            },
        )
    })
    .await?;
    assert!(refused.contains("failed calling webhook"), "{refused}");

    // A change of the template's contents is not judged: it neither waits nor fails, and
    // reaches the member.
    api.patch(
        "held",
        &PatchParams::default(),
        &merge(json!({"spec": {"template": {"data": {"a": "c"}}}})),
    )
    .await
    .context("a template change while the webhook is unreachable")?;
    wait_for("the template change in member1", TIMEOUT, async || {
        let data = copies.get("held").await?.data.unwrap_or_default();
        Ok(match data.get("a").map(String::as_str) {
            Some("c") => Wait::Done(()),
            other => Wait::Pending(format!("member1 has a={other:?}")),
        })
    })
    .await?;
    // Overrides are judged like placement.
    let overridden = api
        .patch(
            "held",
            &PatchParams::default().dry_run(),
            &merge(
                json!({"spec": {"overrides": [{"clusterName": "member1", "clusterOverrides": [
                    {"path": "/data/a", "value": "d"},
                ]}]}}),
            ),
        )
        .await;
    assert!(
        matches!(&overridden, Err(kube::Error::Api(e)) if e.message.contains("failed calling webhook")),
        "{overridden:?}"
    );

    api.patch(
        "held",
        &PatchParams::default(),
        &merge(json!({"metadata": {"labels": {"team": "a"}, "annotations": {"note": "b"}}})),
    )
    .await
    .context("a label and annotation change while the webhook is unreachable")?;
    api.delete("held", &DeleteParams::default()).await?;
    // The controller deletes the copy and releases its finalizer; then ours goes.
    wait_for(
        "the copy deleted and the sync finalizer released",
        TIMEOUT,
        async || {
            let left = api.get("held").await?;
            Ok(
                if copies.get_opt("held").await?.is_none() && !has_sync_finalizer(&left) {
                    Wait::Done(())
                } else {
                    Wait::Pending(format!("finalizers {:?}", left.metadata.finalizers))
                },
            )
        },
    )
    .await?;
    api.patch(
        "held",
        &PatchParams::default(),
        &merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .context("releasing a finalizer while the webhook is unreachable")?;
    wait_for("the object gone", TIMEOUT, async || {
        Ok(match api.get_opt("held").await? {
            None => Wait::Done(()),
            Some(_) => Wait::Pending("still in the hub".into()),
        })
    })
    .await?;
    configs
        .delete(&config_name, &DeleteParams::default())
        .await?;
    Ok(())
}
