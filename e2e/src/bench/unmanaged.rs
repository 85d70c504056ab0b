//! `--unmanaged N`: after the at-rest window, N objects the controller does not manage
//! (half ConfigMaps, half Secrets, unlabelled, small) created straight in member1, in the
//! federated namespaces. The controller keeps only a hash of their names (to adopt or refuse
//! on a create); this measures what that costs it: live heap and RSS per unmanaged object,
//! CPU, and that it writes nothing to the member.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use super::controller::{ControllerProcess, Metrics, operations_delta};
use super::procstat::{CpuSnapshot, CpuUsage, Groups};
use super::report::Unmanaged;
use super::setup::Federation;
use super::workload::Workload;
use super::{Args, progress};

/// The controller's gauge of unmanaged objects, by `type` and `cluster`.
const GAUGE: &str = "hubfed_unmanaged_objects";
/// Waited after the gauge is reached before RSS is read (allocations settle).
const SETTLE: Duration = Duration::from_secs(5);

/// The name of unmanaged object `i`.
fn name(i: usize) -> String {
    format!("unmanaged-{i:07}")
}

fn meta(i: usize, namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name(i)),
        namespace: Some(namespace.to_owned()),
        ..Default::default()
    }
}

/// Creates object `i`: even ones ConfigMaps, odd ones Secrets, in namespace `i % namespaces`.
async fn create(member: &kube::Client, namespaces: &[String], i: usize) -> Result<(), kube::Error> {
    let namespace = &namespaces[(i / 2) % namespaces.len()];
    let post = PostParams::default();
    let value = format!("value {i}");
    if i.is_multiple_of(2) {
        let object = ConfigMap {
            metadata: meta(i, namespace),
            data: Some(BTreeMap::from([("key".to_owned(), value)])),
            ..Default::default()
        };
        Api::<ConfigMap>::namespaced(member.clone(), namespace)
            .create(&post, &object)
            .await
            .map(drop)
    } else {
        let object = Secret {
            metadata: meta(i, namespace),
            data: Some(BTreeMap::from([(
                "key".to_owned(),
                ByteString(value.into_bytes()),
            )])),
            ..Default::default()
        };
        Api::<Secret>::namespaced(member.clone(), namespace)
            .create(&post, &object)
            .await
            .map(drop)
    }
}

/// The gauge for `cluster`, summed over types.
fn gauge(metrics: &Metrics, cluster: &str) -> f64 {
    metrics.sum(GAUGE, &[("cluster", cluster)])
}

pub async fn run(
    args: &Args,
    fed: &Federation,
    workload: &Workload,
    controller: &ControllerProcess,
    groups: &Groups,
    timeout: Duration,
) -> anyhow::Result<Unmanaged> {
    let member = &fed.members[0];
    let cluster = fed.names[0].clone();
    let namespaces = workload.namespace_names();
    let before = controller.metrics().await?;
    let gauge_before = gauge(&before, &cluster);
    let rss_before = controller.rss();
    let hwm_before = controller.peak_rss();
    let cpu_before = CpuSnapshot::take(groups);
    progress(format_args!(
        "unmanaged objects: creating {} in {cluster} ({} in flight); gauge {gauge_before:.0}, controller RSS {:.1} MiB",
        args.unmanaged,
        args.unmanaged_concurrency,
        rss_before as f64 / 1048576.0
    ));
    let began = Instant::now();
    let mut created = 0usize;
    let mut errors = 0usize;
    let mut first_error = None;
    let mut last_report = Instant::now();
    let mut outcomes = futures::stream::iter(0..args.unmanaged)
        .map(|i| create(member, &namespaces, i))
        .buffer_unordered(args.unmanaged_concurrency.max(1));
    while let Some(outcome) = outcomes.next().await {
        match outcome {
            Ok(()) => created += 1,
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(e);
            }
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            controller.ensure_running()?;
            progress(format_args!(
                "unmanaged objects: {created} created, {errors} failed, {:.0}/s",
                created as f64 / began.elapsed().as_secs_f64()
            ));
            last_report = Instant::now();
        }
    }
    drop(outcomes);
    let create_seconds = began.elapsed().as_secs_f64();
    if let Some(e) = &first_error {
        progress(format_args!(
            "unmanaged objects: {errors} creates failed, first: {e}"
        ));
    }
    anyhow::ensure!(created > 0, "unmanaged objects: every create failed");
    let want = gauge_before + created as f64;
    let deadline = Instant::now() + timeout;
    let (gauge_after, reached) = loop {
        controller.ensure_running()?;
        let now = gauge(&controller.metrics().await?, &cluster);
        if now >= want {
            break (now, began.elapsed());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "unmanaged objects: the gauge shows {now:.0} of {want:.0} after {}s",
            timeout.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    progress(format_args!(
        "unmanaged objects: {created} created in {create_seconds:.1}s; gauge at {gauge_after:.0} after {:.1}s; waiting {}s",
        reached.as_secs_f64(),
        SETTLE.as_secs()
    ));
    // A fixed wait on purpose: what is measured is the memory once the allocations settled.
    tokio::time::sleep(SETTLE).await;
    let rss_after = controller.rss();
    let hwm_after = controller.peak_rss();
    let cpu = CpuUsage::between(&cpu_before, &CpuSnapshot::take(groups));
    let after = controller.metrics().await?;
    let member_operations =
        operations_delta(&before.member_operations(), &after.member_operations());
    let member_writes = after.member_writes() - before.member_writes();
    let reconciles = after.sum("controller_runtime_reconcile_total", &[])
        - before.sum("controller_runtime_reconcile_total", &[]);
    let bytes_per_object = (rss_after as f64 - rss_before as f64) / created as f64;
    let (heap_before, heap_after) = (
        before.heap().map(|h| h.allocated_bytes),
        after.heap().map(|h| h.allocated_bytes),
    );
    let heap_bytes_per_object = heap_before
        .zip(heap_after)
        .map(|(b, a)| (a as f64 - b as f64) / created as f64);
    let controller_cpu_seconds = cpu.cpu_seconds.get("controller").copied().unwrap_or(0.0);
    progress(format_args!(
        "unmanaged objects: controller RSS {:.1} → {:.1} MiB = {bytes_per_object:.0} B per object, live heap {} B per object (VmHWM {:.1} → {:.1} MiB); {controller_cpu_seconds:.1} CPU-s; {member_writes:.0} member writes, {reconciles:.0} reconciles",
        rss_before as f64 / 1048576.0,
        rss_after as f64 / 1048576.0,
        heap_bytes_per_object.map_or_else(|| "unknown".to_owned(), |b| format!("{b:.0}")),
        hwm_before as f64 / 1048576.0,
        hwm_after as f64 / 1048576.0,
    ));
    Ok(Unmanaged {
        member: cluster,
        requested: args.unmanaged,
        created,
        create_errors: errors,
        concurrency: args.unmanaged_concurrency,
        create_seconds,
        creates_per_second: created as f64 / create_seconds,
        gauge_before,
        gauge_after,
        gauge_reached_seconds: reached.as_secs_f64(),
        settle_seconds: SETTLE.as_secs_f64(),
        rss_before_bytes: rss_before,
        rss_after_bytes: rss_after,
        hwm_before_bytes: hwm_before,
        hwm_after_bytes: hwm_after,
        bytes_per_object,
        heap_before_bytes: heap_before,
        heap_after_bytes: heap_after,
        heap_bytes_per_object,
        controller_cpu_seconds,
        member_writes,
        member_operations,
        reconciles,
        cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauge_sums_the_types_of_one_cluster() {
        let metrics = Metrics::parse(
            "# TYPE hubfed_unmanaged_objects gauge\n\
             hubfed_unmanaged_objects{cluster=\"member1\",type=\"federatedconfigmap\"} 50003\n\
             hubfed_unmanaged_objects{cluster=\"member1\",type=\"federatedsecret\"} 50000\n\
             hubfed_unmanaged_objects{cluster=\"member2\",type=\"federatedsecret\"} 7\n",
        );
        assert_eq!(gauge(&metrics, "member1"), 100003.0);
        assert_eq!(gauge(&metrics, "member3"), 0.0);
    }
}
