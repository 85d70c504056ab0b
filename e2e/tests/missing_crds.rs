//! A hub without hubfed's own CRDs (one taken over from KubeFed): `works.pull.hubfed.io`,
//! `placementpolicies.scheduling.hubfed.io` and `rolloutstrategies.scheduling.hubfed.io`
//! deleted before the controller starts. It propagates as usual; its log says once per CRD
//! what is missing and nothing more about them; `hubfed_crd_installed` says 0 for each; an
//! object naming a rollout strategy is held with a Warning saying the CRD is missing. Then
//! the PlacementPolicy CRD is applied: with no restart, a PlacementPolicy takes effect on a
//! federated object, the log says so once and the gauge turns 1.
//!
//! Own clusters (their CRDs are deleted) and controller process (its log and metrics are read).

use std::time::Duration;

use anyhow::Context as _;
use hubfed_core::rollout::STRATEGY_ANNOTATION;
use hubfed_e2e::controller::{ControllerOptions, ControllerProcess, print_logs, sample};
use hubfed_e2e::scheduling::create_placement_policy;
use hubfed_e2e::{
    MEMBERS, PrivateFederation, TIMEOUT, Wait, create_federated, create_federated_namespace,
    get_value, install_crds, member_mismatch, modify, placement, report, target, unique_name,
    wait_event, wait_for,
};
use hubfed_testenv::TestEnv;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams};
use serde_json::json;

const WORKS: &str = "works.pull.hubfed.io";
const POLICIES: &str = "placementpolicies.scheduling.hubfed.io";
const STRATEGIES: &str = "rolloutstrategies.scheduling.hubfed.io";
const HUBFED_CRDS: [&str; 3] = [WORKS, POLICIES, STRATEGIES];
const IDENTITY: &str = "missing-crds";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_without_hubfeds_crds_says_so_once_and_takes_a_crd_applied_later()
-> anyhow::Result<()> {
    let env = PrivateFederation::new().start().await?;
    let hub = env.hub().client().await?;
    delete_crds(&hub).await?;
    let controller = ControllerProcess::start(&env, &ControllerOptions::single(IDENTITY))?;
    let outcome = missing_then_applied(&env, &hub, &controller).await;
    if outcome.is_err() {
        print_logs(&env, &[IDENTITY]);
    }
    outcome
}

/// Deletes hubfed's own CRDs from the hub and waits until they are gone.
async fn delete_crds(hub: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(hub.clone());
    for name in HUBFED_CRDS {
        crds.delete(name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting CRD {name}"))?;
    }
    wait_for("hubfed's CRDs gone from the hub", TIMEOUT, async || {
        let mut left = Vec::new();
        for name in HUBFED_CRDS {
            if crds.get_opt(name).await?.is_some() {
                left.push(format!("{name} still there"));
            }
        }
        Ok(Wait::all_or_pending(left))
    })
    .await
}

async fn missing_then_applied(
    env: &TestEnv,
    hub: &Client,
    controller: &ControllerProcess,
) -> anyhow::Result<()> {
    let mut members = Vec::new();
    for name in MEMBERS {
        let cluster = env.cluster(name).context("a member")?;
        members.push((name, cluster.client().await?));
    }
    let namespace = unique_name("missing-crds");
    create_federated_namespace(hub, &members, &namespace).await?;
    let name = "settings";
    let spec = json!({
        "template": {"data": {"mode": "federated"}},
        "placement": placement(&["member1"]),
    });
    create_federated(hub, "ConfigMap", Some(&namespace), name, spec).await?;
    let config_maps = |client: &Client| {
        kube::Api::namespaced_with(client.clone(), &namespace, &target("ConfigMap"))
    };
    wait_for("the ConfigMap propagated to member1", TIMEOUT, async || {
        let copy = get_value(&config_maps(&members[0].1), name).await?;
        Ok(Wait::all_or_pending(
            member_mismatch("member1", copy.as_ref(), &[])
                .into_iter()
                .collect(),
        ))
    })
    .await?;
    wait_gauges(
        controller,
        &[(WORKS, 0.0), (POLICIES, 0.0), (STRATEGIES, 0.0)],
    )
    .await?;

    // An object naming a rollout strategy is held, saying why.
    let staged = "staged";
    let api = create_federated(
        hub,
        "ConfigMap",
        Some(&namespace),
        staged,
        json!({"template": {"data": {"mode": "staged"}}, "placement": placement(&["member1"])}),
    )
    .await?;
    modify(&api, staged, |object| {
        object["metadata"]["annotations"] = json!({STRATEGY_ANNOTATION: "canary"});
    })
    .await?;
    wait_event(
        hub,
        &namespace,
        "RolloutStrategyNotInstalled",
        &[STRATEGIES, "changes are held back"],
    )
    .await?;

    // Long enough for every watch of the missing types to have been refused several times.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let log = std::fs::read_to_string(controller.log_file())?;
    check_log(&log, &[(WORKS, 1), (POLICIES, 1), (STRATEGIES, 1)], 0)?;

    // The PlacementPolicy CRD is applied; a policy choosing every joined cluster adds
    // member2 to the placement.
    let crd = hubfed_api::render::core_crds()
        .into_iter()
        .find(|crd| crd.metadata.name.as_deref() == Some(POLICIES))
        .context("hubfed_api's CRDs hold PlacementPolicy's")?;
    install_crds(hub, &[crd]).await?;
    create_placement_policy(
        hub,
        &namespace,
        name,
        json!({"targetKind": "FederatedConfigMap"}),
    )
    .await?;
    let federated =
        kube::Api::namespaced_with(hub.clone(), &namespace, &hubfed_e2e::federated("ConfigMap"));
    wait_for(
        "the policy placing the ConfigMap in member2 too, with no restart",
        TIMEOUT + hubfed_controller::hub_crds::RECHECK_MAX,
        async || {
            let mut problems = Vec::new();
            let object = get_value(&federated, name).await?.context("the object")?;
            let clusters = &object["spec"]["placement"]["clusters"];
            if *clusters != json!([{"name": "member1"}, {"name": "member2"}]) {
                problems.push(format!("placement {clusters}"));
            }
            let copy = get_value(&config_maps(&members[1].1), name).await?;
            problems.extend(member_mismatch("member2", copy.as_ref(), &[]));
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;
    wait_gauges(
        controller,
        &[(WORKS, 0.0), (POLICIES, 1.0), (STRATEGIES, 0.0)],
    )
    .await?;
    let log = std::fs::read_to_string(controller.log_file())?;
    check_log(&log, &[(WORKS, 1), (POLICIES, 1), (STRATEGIES, 1)], 1)?;
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
    report(format_args!(
        "missing_crds: {} warnings in the controller's log:\n{}",
        warnings.len(),
        warnings.join("\n")
    ));
    Ok(())
}

/// Waits until `hubfed_crd_installed` says `want` for each CRD.
async fn wait_gauges(controller: &ControllerProcess, want: &[(&str, f64)]) -> anyhow::Result<()> {
    wait_for("hubfed_crd_installed", TIMEOUT, async || {
        let Some(metrics) = controller.metrics().await else {
            return Ok(Wait::Pending("no metrics yet".to_owned()));
        };
        let mut problems = Vec::new();
        for (crd, value) in want {
            let label = format!("crd=\"{crd}\"");
            let got = sample(&metrics, "hubfed_crd_installed", &[&label]);
            if got != Some(*value) {
                problems.push(format!("{crd}: {got:?}, want {value}"));
            }
        }
        Ok(Wait::all_or_pending(problems))
    })
    .await
}

/// The log holds `missing` warnings naming each CRD and no other warning about hubfed's own
/// types (no watch error, no 404), and `appeared` lines saying PlacementPolicy's is installed.
fn check_log(log: &str, missing: &[(&str, usize)], appeared: usize) -> anyhow::Result<()> {
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
    for (crd, want) in missing {
        let said: Vec<&&str> = warnings
            .iter()
            .filter(|l| l.contains(&format!("CRD {crd} is not installed")))
            .collect();
        anyhow::ensure!(
            said.len() == *want,
            "{} warnings that {crd} is missing, want {want}: {said:#?}",
            said.len()
        );
    }
    let others: Vec<&&str> = warnings
        .iter()
        .filter(|l| !l.contains("is not installed"))
        .filter(|l| {
            [
                "Work",
                "PlacementPolicy",
                "RolloutStrateg",
                "404",
                "hubfed.io",
            ]
            .iter()
            .any(|word| l.contains(word))
        })
        .collect();
    anyhow::ensure!(
        others.is_empty(),
        "warnings about hubfed's own types: {others:#?}"
    );
    let installed = log
        .lines()
        .filter(|l| l.contains(" INFO ") && l.contains(&format!("CRD {POLICIES} is installed")))
        .count();
    anyhow::ensure!(
        installed == appeared,
        "{installed} lines saying {POLICIES} is installed, want {appeared}"
    );
    Ok(())
}
