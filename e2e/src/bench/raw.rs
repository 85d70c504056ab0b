//! The raw apply limit: the benchmark's member objects written straight to the members by a
//! plain client, with server-side apply, as fast as the members take them — the ceiling any
//! controller writing the same objects can reach on this machine. The writes ask for the
//! object's metadata only as their answer (`as=PartialObjectMetadata`) and skip the member's
//! unknown-field check (`fieldValidation=Ignore`), as hubfed's do: the cheapest apply a
//! client can make.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use tokio::sync::Semaphore;

use super::stats::Percentiles;
use super::workload::{Workload, member_object};

/// Field manager of the raw writes.
const RAW_FIELD_MANAGER: &str = "hubfed-bench-raw";

#[derive(Clone, Debug, serde::Serialize)]
pub struct RawResult {
    pub writes: usize,
    pub errors: usize,
    pub seconds: f64,
    pub writes_per_second: f64,
    pub concurrency: usize,
    pub per_member_concurrency: usize,
    pub write_latency: Percentiles,
}

/// Applies every object of `workload` to every member, into the raw namespaces: at most
/// `concurrency` requests in flight, at most `per_member` per member. Members are taken in
/// turn so all of them stay busy.
pub async fn run(
    members: &[Client],
    workload: &Workload,
    concurrency: usize,
    per_member: usize,
) -> anyhow::Result<RawResult> {
    let raw_namespaces = workload.raw_namespace_names();
    let limits: Vec<Arc<Semaphore>> = members
        .iter()
        .map(|_| Arc::new(Semaphore::new(per_member.max(1))))
        .collect();
    let writes = (0..workload.objects)
        .flat_map(|index| (0..members.len()).map(move |cluster| (index, cluster)));
    let began = Instant::now();
    let outcomes: Vec<Result<Duration, kube::Error>> = futures::stream::iter(writes)
        .map(|(index, cluster)| {
            let id = workload.id(index);
            let namespace = &raw_namespaces[index % raw_namespaces.len()];
            let body = member_object(&id, 0, namespace);
            let api: Api<DynamicObject> =
                Api::namespaced_with(members[cluster].clone(), namespace, &id.kind.target());
            let limit = Arc::clone(&limits[cluster]);
            async move {
                let _permit = limit.acquire_owned().await;
                let started = Instant::now();
                api.patch_metadata(
                    &id.name,
                    &PatchParams::apply(RAW_FIELD_MANAGER)
                        .force()
                        .validation_ignore(),
                    &Patch::Apply(&body),
                )
                .await
                .map(|_| started.elapsed())
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let seconds = began.elapsed().as_secs_f64();
    let mut latencies = Vec::with_capacity(outcomes.len());
    let mut errors = Vec::new();
    for outcome in outcomes {
        match outcome {
            Ok(latency) => latencies.push(latency),
            Err(e) => errors.push(e),
        }
    }
    if let Some(first) = errors.first() {
        super::progress(format_args!(
            "raw: {} of {} writes failed, first: {first}",
            errors.len(),
            errors.len() + latencies.len()
        ));
    }
    anyhow::ensure!(!latencies.is_empty(), "raw apply limit: every write failed");
    Ok(RawResult {
        writes: latencies.len(),
        errors: errors.len(),
        seconds,
        writes_per_second: latencies.len() as f64 / seconds,
        concurrency,
        per_member_concurrency: per_member,
        write_latency: Percentiles::of(&latencies),
    })
}

/// Deletes what [`run`] wrote (every kind, in every raw namespace of every member), so the
/// phases after it do not carry its objects in etcd: with `--object-bytes` they are gigabytes.
/// Returns the number of delete-collection requests made.
pub async fn delete(members: &[Client], workload: &Workload) -> anyhow::Result<usize> {
    use kube::api::{DeleteParams, ListParams};

    let requests: Vec<_> = members
        .iter()
        .flat_map(|member| {
            workload
                .raw_namespace_names()
                .into_iter()
                .flat_map(move |namespace| {
                    super::workload::KINDS.into_iter().map(move |kind| {
                        let api: Api<DynamicObject> =
                            Api::namespaced_with(member.clone(), &namespace, &kind.target());
                        (api, namespace.clone(), kind)
                    })
                })
        })
        .collect();
    let count = requests.len();
    // One at a time, each tried up to 5 times: etcd, busy compacting gigabytes, may time a
    // request out ("etcdserver: request timed out"). A collection that cannot be deleted is
    // reported and the next one tried.
    let mut failed = Vec::new();
    for (api, namespace, kind) in requests {
        let mut attempt = 1;
        loop {
            match api
                .delete_collection(&DeleteParams::default(), &ListParams::default())
                .await
            {
                Ok(_) => break,
                Err(e) if attempt < 5 && !is_final(&e) => {
                    super::progress(format_args!(
                        "deleting the raw {}s in {namespace} (attempt {attempt}): {e}; again",
                        kind.name()
                    ));
                    tokio::time::sleep(std::time::Duration::from_secs(2 * attempt)).await;
                    attempt += 1;
                }
                Err(e) => {
                    failed.push(format!("the raw {}s in {namespace}: {e}", kind.name()));
                    break;
                }
            }
        }
    }
    anyhow::ensure!(
        failed.is_empty(),
        "{} of {count} collections not deleted, first: {}",
        failed.len(),
        failed[0]
    );
    Ok(count)
}

/// An answer no retry changes: refused or not found.
fn is_final(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if matches!(status.code, 400..=404 | 422))
}
