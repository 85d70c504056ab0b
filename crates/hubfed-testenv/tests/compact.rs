//! [`TestEnv::compact_etcd`]: what was overwritten and deleted leaves etcd's database file,
//! and the clusters go on serving.

use std::collections::BTreeMap;
use std::time::Duration;

use hubfed_testenv::{TestEnv, TestEnvConfig};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

/// Bytes of each version's value; 20 versions, then the object is deleted.
const VALUE_BYTES: usize = 500_000;
const VERSIONS: usize = 20;

fn config_map(name: &str, value: String) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("v".to_owned(), value)])),
        ..Default::default()
    }
}

#[test]
fn compacting_etcd_frees_what_was_overwritten_and_deleted() -> anyhow::Result<()> {
    let env = TestEnv::start(TestEnvConfig {
        members: 0,
        controller_manager: false,
        ..TestEnvConfig::default()
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let api: Api<ConfigMap> = runtime
        .block_on(async { anyhow::Ok(Api::namespaced(env.hub().client().await?, "default")) })?;
    runtime.block_on(async {
        for version in 0..VERSIONS {
            let value = format!("{version}:{}", "x".repeat(VALUE_BYTES));
            api.patch(
                "big",
                &PatchParams::apply("compact-test").force(),
                &Patch::Apply(config_map("big", value)),
            )
            .await?;
        }
        api.delete("big", &DeleteParams::default()).await?;
        anyhow::Ok(())
    })?;

    let (before, after) = env.compact_etcd()?;
    let written = (VALUE_BYTES * VERSIONS) as u64;
    assert!(
        before >= written,
        "the database held {before} bytes after {written} bytes were written"
    );
    assert!(
        after + written / 2 <= before,
        "compacting left {after} of {before} bytes"
    );

    // Still serving: a write and a read.
    runtime.block_on(async {
        let small = config_map("small", "1".to_owned());
        api.create(&PostParams::default(), &small).await?;
        let read = tokio::time::timeout(Duration::from_secs(10), api.get("small")).await??;
        assert_eq!(read.data, small.data);
        anyhow::Ok(())
    })?;
    Ok(())
}
