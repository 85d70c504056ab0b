//! What the sync controller leaves in and sends to members' copies (docs/kubefed-compatibility.md
//! §2.4), against a real hub and two real members: orphaned copies, member-owned fields
//! retained (clusterIP, nodePort, replicas), overrides that cannot apply and label overrides,
//! template annotations, immutable fields.
//!
//! Each test has its own namespace.

use anyhow::{Context as _, bail, ensure};
use hubfed_api::names::{MANAGED_LABEL, ORPHAN_ANNOTATION};
use hubfed_e2e::{
    Expected, Federation, MEMBERS, TIMEOUT, Wait, cluster_status, copy_problems, dynamic_api,
    federated, get_value, labels, member_mismatch, modify, placement, pod_template, propagated_ok,
    propagation_condition, set_pointer, show, unique_ns, wait_copies, wait_federated_ok, wait_for,
};
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

#[tokio::test]
async fn orphaned_copies_stay_unmanaged() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("orphan");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "kept";
    let hub_api = fed
        .create_federated(
            "ConfigMap",
            Some(&ns),
            name,
            json!({ "template": { "data": { "k": "v" } }, "placement": placement(&MEMBERS) }),
        )
        .await?;
    let members = fed.member_apis("ConfigMap", Some(&ns)).await?;
    let both = Expected::each(MEMBERS.into_iter().zip(&members), &[]);
    wait_copies("the ConfigMap in both members", name, &both).await?;

    hub_api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { ORPHAN_ANNOTATION: "true" } } })),
        )
        .await?;
    hub_api.delete(name, &DeleteParams::default()).await?;
    wait_for(
        "the federated ConfigMap gone, its copies kept without the managed label",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            if get_value(&hub_api, name).await?.is_some() {
                problems.push("the federated ConfigMap still exists".to_owned());
            }
            for (cluster, api) in MEMBERS.iter().zip(&members) {
                let Some(copy) = get_value(api, name).await? else {
                    bail!("{cluster}: the orphaned copy was deleted");
                };
                if copy["metadata"]["labels"].get(MANAGED_LABEL).is_some() {
                    problems.push(format!("{cluster}: labels {:?}", labels(&copy)));
                }
                if copy["data"]["k"] != "v" {
                    problems.push(format!("{cluster}: data {}", copy["data"]));
                }
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await
}

#[tokio::test]
async fn service_cluster_ip_and_node_ports_survive_template_updates() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("nodeport");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "web";
    let hub_api = fed.create_federated("Service", Some(&ns),
        name,
        json!({
            "template": {
                "metadata": { "labels": { "revision": "1" } },
                "spec": {
                    "type": "NodePort",
                    "selector": { "app": "web" },
                    "ports": [{ "name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080 }],
                },
            },
            "placement": placement(&MEMBERS),
        }),
    )
    .await?;
    let members = fed.member_apis("Service", Some(&ns)).await?;

    // uid, clusterIP and nodePort of each member's Service once allocated.
    let allocated: Vec<(Value, Value, Value)> = wait_for(
        "the NodePort Service in both members",
        TIMEOUT,
        async || {
            let mut found = Vec::new();
            let mut problems = Vec::new();
            for (cluster, api) in MEMBERS.iter().zip(&members) {
                let copy = get_value(api, name).await?;
                match (member_mismatch(cluster, copy.as_ref(), &[]), copy) {
                    (None, Some(copy)) => found.push((
                        copy["metadata"]["uid"].clone(),
                        copy["spec"]["clusterIP"].clone(),
                        copy["spec"]["ports"][0]["nodePort"].clone(),
                    )),
                    (problem, _) => problems.extend(problem),
                }
            }
            Ok(if problems.is_empty() {
                Wait::Done(found)
            } else {
                Wait::Pending(problems.join("; "))
            })
        },
    )
    .await?;
    for (cluster, (_, cluster_ip, node_port)) in MEMBERS.iter().zip(&allocated) {
        ensure!(
            cluster_ip.is_string() && node_port.is_u64(),
            "{cluster}: no clusterIP/nodePort allocated ({cluster_ip}, {node_port})"
        );
    }

    modify(&hub_api, name, |object| {
        let template = &mut object["spec"]["template"];
        set_pointer(template, "/metadata/labels/revision", json!("2"));
        set_pointer(template, "/spec/ports/0/targetPort", json!(9090));
    })
    .await?;
    wait_for(
        "the template update in both members, clusterIP and nodePort unchanged",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            for ((cluster, api), (uid, cluster_ip, node_port)) in
                MEMBERS.iter().zip(&members).zip(&allocated)
            {
                let copy = get_value(api, name).await?;
                if let Some(copy) = &copy {
                    // Once allocated these never change back: a difference is final.
                    if copy["metadata"]["uid"] != *uid {
                        bail!("{cluster}: the Service was recreated");
                    }
                    if copy["spec"]["clusterIP"] != *cluster_ip
                        || copy["spec"]["ports"][0]["nodePort"] != *node_port
                    {
                        bail!(
                            "{cluster}: clusterIP/nodePort changed from {cluster_ip}/{node_port} to {}/{}",
                            copy["spec"]["clusterIP"],
                            copy["spec"]["ports"][0]["nodePort"]
                        );
                    }
                }
                problems.extend(member_mismatch(
                    cluster,
                    copy.as_ref(),
                    &[
                        ("/metadata/labels/revision", Some(&json!("2"))),
                        ("/spec/ports/0/targetPort", Some(&json!(9090))),
                    ],
                ));
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await
}

#[tokio::test]
async fn retained_replicas_survive_template_updates() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("retain");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "api";
    let hub_api = fed
        .create_federated(
            "Deployment",
            Some(&ns),
            name,
            json!({
                "template": {
                    "metadata": { "labels": { "app": "api", "revision": "1" } },
                    "spec": {
                        "replicas": 2,
                        "selector": { "matchLabels": { "app": "api" } },
                        "template": pod_template("api", "registry.example/api:1.0"),
                    },
                },
                "placement": placement(&MEMBERS),
                "retainReplicas": true,
            }),
        )
        .await?;
    let [member1, member2] = fed.member_apis("Deployment", Some(&ns)).await?;
    let two = json!(2);
    let both = [("member1", &member1), ("member2", &member2)];
    let both = Expected::each(both, &[("/spec/replicas", Some(&two))]);
    wait_copies("the Deployment in both members", name, &both).await?;

    // An HPA or a person scales member1 (its own field manager, as kubectl does).
    member1
        .patch(
            name,
            &PatchParams {
                field_manager: Some("kubectl-scale".to_owned()),
                ..Default::default()
            },
            &Patch::Merge(json!({ "spec": { "replicas": 5 } })),
        )
        .await?;
    modify(&hub_api, name, |object| {
        set_pointer(
            &mut object["spec"]["template"],
            "/metadata/labels/revision",
            json!("2"),
        );
    })
    .await?;
    let (revision, five) = (json!("2"), json!(5));
    let revision_2 = ("/metadata/labels/revision", Some(&revision));
    wait_copies(
        "the template update in both members, member1 keeping 5 replicas",
        name,
        &[
            Expected::copy("member1", &member1)
                .with(&[revision_2, ("/spec/replicas", Some(&five))]),
            Expected::copy("member2", &member2).with(&[revision_2, ("/spec/replicas", Some(&two))]),
        ],
    )
    .await
}

#[tokio::test]
async fn invalid_overrides_fail_only_their_cluster() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("badoverride");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let members = fed.member_apis("ConfigMap", Some(&ns)).await?;
    // KubeFed refuses overrides of name, namespace, generateName and kind; and a patch
    // operation that does not apply fails the same way.
    let cases = [
        (
            "rename",
            json!({ "path": "/metadata/name", "value": "renamed" }),
        ),
        (
            "remove-missing",
            json!({ "op": "remove", "path": "/data/missing" }),
        ),
    ];
    for (name, bad_override) in &cases {
        fed.create_federated(
            "ConfigMap",
            Some(&ns),
            name,
            json!({
                "template": { "data": { "k": "v" } },
                "placement": placement(&MEMBERS),
                "overrides": [{ "clusterName": "member1", "clusterOverrides": [bad_override] }],
            }),
        )
        .await?;
    }
    let hub_api = dynamic_api(fed.hub().await?, &federated("ConfigMap"), Some(&ns));
    for (name, bad_override) in &cases {
        let path = bad_override["path"].as_str().unwrap_or_default();
        wait_for(
            &format!("{name}: member1 ApplyOverridesFailed naming {path}, member2 propagated"),
            TIMEOUT,
            async || {
                let mut problems = Vec::new();
                let object = get_value(&hub_api, name)
                    .await?
                    .with_context(|| format!("the federated ConfigMap {name} disappeared"))?;
                match cluster_status(&object, "member1") {
                    Some(entry)
                        if entry["status"] == "ApplyOverridesFailed"
                            && entry["message"].as_str().is_some_and(|m| m.contains(path)) => {}
                    other => problems.push(format!("status.clusters[member1] {}", show(other))),
                }
                match propagation_condition(&object) {
                    Some(c) if c["status"] == "False" && c["reason"] == "CheckClusters" => {}
                    other => problems.push(format!("Propagation condition {}", show(other))),
                }
                if get_value(&members[0], name).await?.is_some() {
                    problems.push("member1 holds the object".to_owned());
                }
                let v = json!("v");
                let in2 = Expected::copy("member2", &members[1]).with(&[("/data/k", Some(&v))]);
                problems.extend(copy_problems(name, &[in2]).await?);
                Ok(Wait::all_or_pending(problems))
            },
        )
        .await?;
    }
    Ok(())
}

/// A KubeFed user's label override on a template without labels: `replace` (op omitted) of a
/// missing `/metadata/labels`, which KubeFed's JSON patch library applies as an add (issue 10).
#[tokio::test]
async fn label_overrides_on_templates_without_labels_reach_members() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("labeloverride");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let templates = [
        ("ConfigMap", json!({"data": {"k": "v"}})),
        ("Secret", json!({"stringData": {"k": "v"}})),
        (
            "Service",
            json!({"spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}}),
        ),
    ];
    for (kind, template) in &templates {
        let overrides: Vec<Value> = MEMBERS
            .iter()
            .map(|cluster| {
                json!({"clusterName": cluster, "clusterOverrides": [
                    {"path": "/metadata/labels", "value": {"region": format!("{cluster}-region")}},
                ]})
            })
            .collect();
        fed.create_federated(
            kind,
            Some(&ns),
            "labelled",
            json!({"template": template, "placement": placement(&MEMBERS), "overrides": overrides}),
        )
        .await?;
    }
    for (kind, _) in &templates {
        let members = fed.member_apis(kind, Some(&ns)).await?;
        let regions = MEMBERS.map(|cluster| json!(format!("{cluster}-region")));
        let managed = json!("true");
        let expected: Vec<Expected> = MEMBERS
            .iter()
            .zip(&members)
            .zip(&regions)
            .map(|((cluster, api), region)| {
                Expected::copy(cluster, api).with(&[
                    ("/metadata/labels/region", Some(region)),
                    ("/metadata/labels/kubefed.io~1managed", Some(&managed)),
                ])
            })
            .collect();
        wait_copies(
            &format!("{kind}: the override's labels in both members"),
            "labelled",
            &expected,
        )
        .await?;
    }
    Ok(())
}

#[tokio::test]
async fn template_annotations_reach_members() -> anyhow::Result<()> {
    // KubeFed stripped template annotations; hubfed propagates them, and leaves alone the
    // annotations that others put on member objects.
    let fed = Federation::shared();
    let ns = unique_ns("annotations");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "annotated";
    let hub_api = fed
        .create_federated(
            "ConfigMap",
            Some(&ns),
            name,
            json!({
                "template": {
                    "metadata": { "annotations": { "example.com/owner": "team-a" } },
                    "data": { "k": "v" },
                },
                "placement": placement(&MEMBERS),
            }),
        )
        .await?;
    let members = fed.member_apis("ConfigMap", Some(&ns)).await?;
    let owner_path = "/metadata/annotations/example.com~1owner";
    let local_path = "/metadata/annotations/example.com~1local-note";
    let team_a = json!("team-a");
    let both = Expected::each(
        MEMBERS.into_iter().zip(&members),
        &[(owner_path, Some(&team_a))],
    );
    wait_copies("the template annotation in both members", name, &both).await?;

    members[0]
        .patch(
            name,
            &PatchParams {
                field_manager: Some("kubectl-annotate".to_owned()),
                ..Default::default()
            },
            &Patch::Merge(
                json!({ "metadata": { "annotations": { "example.com/local-note": "keep me" } } }),
            ),
        )
        .await?;
    modify(&hub_api, name, |object| {
        set_pointer(&mut object["spec"]["template"], owner_path, json!("team-b"));
    })
    .await?;
    let team_b = json!("team-b");
    let note = json!("keep me");
    wait_copies(
        "the annotation update in both members, member1's own annotation kept",
        name,
        &[
            Expected::copy("member1", &members[0])
                .with(&[(owner_path, Some(&team_b)), (local_path, Some(&note))]),
            Expected::copy("member2", &members[1]).with(&[(owner_path, Some(&team_b))]),
        ],
    )
    .await
}

#[tokio::test]
async fn immutable_field_changes_are_reported_then_recreated_on_request() -> anyhow::Result<()> {
    // A Job's pod template cannot change: the member refuses, and the cluster reports
    // UpdateFailed with the API server's message. With the opt-in annotation hubfed deletes
    // and recreates the member Job instead.
    let fed = Federation::shared();
    let ns = unique_ns("immutable");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "batch";
    let template = |image: &str| {
        json!({"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": image}],
        }}}})
    };
    let hub_api = fed
        .create_federated(
            "Job",
            Some(&ns),
            name,
            json!({"template": template("busybox:1"), "placement": placement(&MEMBERS)}),
        )
        .await?;
    wait_federated_ok("the Job propagated", &hub_api, name, &MEMBERS).await?;
    let members = fed.member_apis("Job", Some(&ns)).await?;
    let image_path = "/spec/template/spec/containers/0/image";
    let mut first_uids = Vec::new();
    for api in &members {
        let job = get_value(api, name).await?.context("member Job")?;
        first_uids.push(job["metadata"]["uid"].clone());
    }

    modify(&hub_api, name, |object| {
        object["spec"]["template"] = template("busybox:2");
    })
    .await?;
    wait_for(
        "UpdateFailed naming the immutable field",
        TIMEOUT,
        async || {
            let object = get_value(&hub_api, name).await?.context("federated Job")?;
            let mut problems = Vec::new();
            for cluster in MEMBERS {
                match cluster_status(&object, cluster) {
                    Some(entry)
                        if entry["status"] == "UpdateFailed"
                            && entry["message"]
                                .as_str()
                                .is_some_and(|m| m.contains("immutable")) => {}
                    other => problems.push(format!("status.clusters[{cluster}] {}", show(other))),
                }
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;
    for api in &members {
        let job = get_value(api, name).await?.context("member Job")?;
        ensure!(
            job.pointer(image_path) == Some(&json!("busybox:1")),
            "member Job changed: {job}"
        );
    }

    modify(&hub_api, name, |object| {
        object["metadata"]["annotations"] =
            json!({hubfed_api::names::RECREATE_ON_IMMUTABLE_ANNOTATION: "true"});
    })
    .await?;
    let new_image = json!("busybox:2");
    wait_for(
        "the member Jobs recreated with the new template",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            for ((cluster, api), old_uid) in MEMBERS.iter().zip(&members).zip(&first_uids) {
                let job = get_value(api, name).await?;
                problems.extend(member_mismatch(
                    cluster,
                    job.as_ref(),
                    &[(image_path, Some(&new_image))],
                ));
                if let Some(job) = &job
                    && &job["metadata"]["uid"] == old_uid
                {
                    problems.push(format!("{cluster}: same uid, not recreated"));
                }
            }
            if let Some(object) = get_value(&hub_api, name).await?
                && let Wait::Pending(p) = propagated_ok(&object, &MEMBERS)
            {
                problems.push(p);
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await
}
