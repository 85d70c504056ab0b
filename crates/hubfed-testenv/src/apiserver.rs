//! A cluster's kube-apiserver: its flags, its certificates on disk, and waiting until it is
//! ready.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::pki::ClusterPki;
use crate::process::alive;
use crate::{Cluster, Error, block_on, write};

/// Waits until the cluster's API server answers `/readyz` with `ok`.
pub(crate) fn wait_ready(cluster: &mut Cluster, timeout: Duration) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    let pid = cluster.apiserver.pid();
    let ready = block_on(async {
        match cluster.client().await {
            Ok(client) => readyz_ok(&client, pid, deadline).await,
            Err(e) => Err(format!("no client: {e}")),
        }
    });
    ready.map_err(|last| Error::NotReady {
        component: format!("{} kube-apiserver ({last})", cluster.name),
        seconds: timeout.as_secs(),
        log: cluster.apiserver.log_tail(30),
    })
}

/// Asks `client`'s server for `/readyz` until it answers `ok`, its process `pid` has ended
/// or `deadline` has passed; each request may take 10 s at most. The error says what the
/// server answered last (or that it exited).
pub(crate) async fn readyz_ok(
    client: &kube::Client,
    pid: Option<u32>,
    deadline: Instant,
) -> Result<(), String> {
    let mut last = String::from("no answer");
    while Instant::now() < deadline {
        if !alive(pid) {
            return Err(format!("exited; last /readyz: {last}"));
        }
        let Ok(req) = http::Request::get("/readyz?verbose").body(Vec::new()) else {
            return Err("cannot build a /readyz request".into());
        };
        let limit = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(10));
        match tokio::time::timeout(limit, client.request_text(req)).await {
            Ok(Ok(body)) if body.trim().ends_with("readyz check passed") => return Ok(()),
            Ok(Ok(body)) => last = failed_checks(&body),
            Ok(Err(e)) => last = failed_checks(&e.to_string()),
            Err(_) => last = format!("no answer within {}s", limit.as_secs()),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!("last /readyz: {last}"))
}

/// The failed checks of a verbose `/readyz` answer (`[-]etcd failed: ...`), else the
/// answer itself, on one line and short.
fn failed_checks(answer: &str) -> String {
    let failed: Vec<&str> = answer
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("[-]"))
        .collect();
    let text = if failed.is_empty() {
        answer.split_whitespace().collect::<Vec<_>>().join(" ")
    } else {
        failed.join("; ")
    };
    text.chars().take(300).collect()
}

/// Writes a cluster's CA, serving certificate and service-account keys into `cdir`.
pub(crate) fn write_pki(cdir: &Path, pki: &ClusterPki) -> Result<(), Error> {
    write(&cdir.join("ca.crt"), &pki.ca_cert)?;
    write(&cdir.join("serving.crt"), &pki.serving_cert)?;
    write(&cdir.join("serving.key"), &pki.serving_key)?;
    write(&cdir.join("sa.key"), &pki.service_account_key)?;
    write(&cdir.join("sa.pub"), &pki.service_account_public_key)
}

/// The kube-apiserver's flags: cluster `name`'s objects under its own etcd prefix, served on
/// loopback `port` with the certificates in `cdir`.
pub(crate) fn apiserver_args(cdir: &Path, name: &str, etcd_url: &str, port: u16) -> Vec<String> {
    let d = |f: &str| cdir.join(f).display().to_string();
    vec![
        format!("--etcd-servers={etcd_url}"),
        format!("--etcd-prefix=/{name}/registry"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        // A loopback advertise address is refused by Endpoints validation, and without
        // one the server needs a default route; no endpoint reconciler avoids both.
        "--advertise-address=127.0.0.1".into(),
        "--endpoint-reconciler-type=none".into(),
        format!("--cert-dir={}", d("certs")),
        format!("--tls-cert-file={}", d("serving.crt")),
        format!("--tls-private-key-file={}", d("serving.key")),
        format!("--client-ca-file={}", d("ca.crt")),
        "--authorization-mode=Node,RBAC".into(),
        format!("--service-account-issuer=https://127.0.0.1:{port}"),
        format!("--service-account-key-file={}", d("sa.pub")),
        format!("--service-account-signing-key-file={}", d("sa.key")),
        // A /16: every import of multi-cluster services holds a derived ClusterIP Service in
        // every member (the benchmark's 500 imports and 100 exported Services per member
        // would exhaust a /24's 254 addresses).
        "--service-cluster-ip-range=10.0.0.0/16".into(),
        "--allow-privileged=true".into(),
        // `/debug/pprof` only when asked for (`HUBFED_APISERVER_PROFILING=1`: profiling a
        // benchmark's API servers, e.g. `kubectl get --raw /debug/pprof/profile?seconds=30`).
        format!(
            "--profiling={}",
            std::env::var("HUBFED_APISERVER_PROFILING").is_ok_and(|v| v == "1")
        ),
        "--v=0".into(),
    ]
}

/// Flags added to a member's API server with [`crate::TestEnvConfig::light_members`]. Each
/// was measured (docs/development.md, "Light members"); what a federation needs of a member
/// stays: core/v1, apps/v1, batch/v1, networking.k8s.io/v1, policy/v1, RBAC, coordination,
/// events, CRDs, TokenRequest/TokenReview/SubjectAccessReview, admission webhooks and
/// policies, server-side apply and watch.
pub const LIGHT_MEMBER_FLAGS: &[&str] = &[
    // Only the API groups above, plus what the API server itself needs to become ready
    // (apiregistration for the aggregator; discovery, storage and resource for the Node
    // authorizer's and the kubernetes Service's informers). Off: autoscaling,
    // certificates.k8s.io, flowcontrol.apiserver.k8s.io, node.k8s.io, scheduling.k8s.io.
    "--runtime-config=api/all=false,v1=true,apps/v1=true,batch/v1=true,\
     networking.k8s.io/v1=true,policy/v1=true,rbac.authorization.k8s.io/v1=true,\
     coordination.k8s.io/v1=true,events.k8s.io/v1=true,apiextensions.k8s.io/v1=true,\
     authentication.k8s.io/v1=true,authorization.k8s.io/v1=true,\
     admissionregistration.k8s.io/v1=true,apiregistration.k8s.io/v1=true,\
     discovery.k8s.io/v1=true,storage.k8s.io/v1=true,resource.k8s.io/v1=true",
    // Their informers would wait forever for scheduling.k8s.io and node.k8s.io.
    "--disable-admission-plugins=Priority,RuntimeClass",
    // Plain max-in-flight limits; the flowcontrol group is off.
    "--enable-priority-and-fairness=false",
    // No per-resource object counts from etcd every minute, no database size every 30 s.
    "--etcd-count-metric-poll-period=0",
    "--etcd-db-metric-poll-interval=0",
    // `/healthz`'s etcd check waits 10 s instead of 2: all members share one etcd, which a
    // saturated machine lets answer late, and the controller probes `/healthz` (KubeFed's
    // health check). At 50 members × 1,000 objects the 2 s check failed 501 times in a cold
    // start and the members flapped Ready → not Ready 278 times — an artifact of the shared
    // etcd, not of a member. An etcd that is down still fails it, 10 s later.
    "--etcd-healthcheck-timeout=10s",
];

/// Flag added to a member's API server with `member_watch_cache: false`
/// ([`crate::TestEnvConfig::member_watch_cache`]): lists and watches served by etcd, no
/// per-resource cache holding every object once more.
pub const NO_WATCH_CACHE_FLAG: &str = "--watch-cache=false";

/// A member API server's Go memory limit (`GOMEMLIMIT`, e.g. `1GiB`):
/// `HUBFED_MEMBER_APISERVER_GOMEMLIMIT` when set. For the large-object benchmark, whose member
/// API servers (watch caches off) otherwise keep gigabytes of garbage after reading ~1 MB
/// objects: the Go runtime collects and gives memory back as it nears the limit.
pub fn member_memory_limit() -> Option<String> {
    std::env::var("HUBFED_MEMBER_APISERVER_GOMEMLIMIT")
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// Environment of a light member's API server: collect garbage at 50 % heap growth instead
/// of 100 %.
pub(crate) const LIGHT_MEMBER_ENV: &[(&str, &str)] = &[("GOGC", "50")];
