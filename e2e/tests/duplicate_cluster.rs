//! One API server joined under two names (issue 9): an object placed through one name is not
//! placed through the other, whose plan used to delete it — and the first recreated it, and so
//! on. hubfed recognises the two names (the same `kube-system` UID), writes and deletes nothing
//! through either, and says so in status; once one is unjoined all is as before.
//!
//! Its own test binary: the second name changes the cluster registry.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use hubfed_e2e::{
    Federation, MEMBERS, TIMEOUT, Wait, cluster_status, dynamic_api, federated, federated_object,
    get_value, placement, show, target, unique_ns, wait_federated_ok, wait_for,
};
use kube::api::PostParams;
use serde_json::json;

const SECOND_NAME: &str = "member1-again";

#[tokio::test]
async fn one_api_server_joined_twice_is_reported_not_fought_over() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("twice");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let resource = federated("ConfigMap");
    let hub_api = dynamic_api(fed.hub().await?, &resource, Some(&ns));
    let spec = json!({"template": {"data": {"k": "v"}}, "placement": placement(&["member1"])});
    hub_api
        .create(
            &PostParams::default(),
            &federated_object(&resource, Some(&ns), "settings", spec),
        )
        .await?;
    wait_federated_ok("propagated to member1", &hub_api, "settings", &["member1"]).await?;
    let member1 = dynamic_api(
        fed.client("member1").await?,
        &target("ConfigMap"),
        Some(&ns),
    );
    let uid = |copy: Option<serde_json::Value>| copy.map(|c| c["metadata"]["uid"].clone());
    let original = uid(get_value(&member1, "settings").await?).context("member1's copy")?;

    let joined = fed.join(SECOND_NAME, fed.cluster("member1")?).await;
    let result = async {
        joined?;
        wait_for("member1 reported DuplicateCluster", TIMEOUT, async || {
            let object = get_value(&hub_api, "settings").await?.context("gone")?;
            let entry = cluster_status(&object, "member1");
            Ok(match entry {
                Some(e) if e["status"] == "DuplicateCluster" => Wait::Done(()),
                other => Wait::Pending(format!("member1 status {}", show(other))),
            })
        })
        .await?;
        // Not fought over: the copy stays, the same object.
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < until {
            let now = uid(get_value(&member1, "settings").await?);
            ensure!(
                now.as_ref() == Some(&original),
                "member1's copy was deleted or replaced: {now:?}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        anyhow::Ok(())
    }
    .await;
    let unjoined = fed.unjoin(SECOND_NAME).await;
    result?;
    unjoined?;

    wait_federated_ok(
        "propagated to member1 again",
        &hub_api,
        "settings",
        &["member1"],
    )
    .await?;
    ensure!(
        uid(get_value(&member1, "settings").await?).as_ref() == Some(&original),
        "member1's copy was replaced"
    );
    Ok(())
}
