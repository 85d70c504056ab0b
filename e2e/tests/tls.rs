//! KubeFedCluster `disabledTLSValidations` short of `*` (docs/kubefed-compatibility.md §1.3),
//! against member1's real API server: reached under a host name its serving certificate does not
//! carry, the member is Ready only when `SubjectName` is skipped, and its chain is verified
//! regardless.
//!
//! The wrong host name comes from an HTTP CONNECT proxy run by the test (the clusters'
//! `proxyURL`): it tunnels `CONNECT member1.hubfed-tls.invalid:<port>` to member1's API server
//! on 127.0.0.1, whose certificate names only `localhost`, `kubernetes…` and 127.0.0.1.
//!
//! Its own test binary: the extra KubeFedClusters change the cluster registry every placement
//! reads.

use TlsValidation::{SubjectName, ValidityPeriod};
use anyhow::{Context as _, bail, ensure};
use hubfed_api::kubefedcluster::{
    ClusterConditionType, KubeFedCluster, KubeFedClusterSpec, LocalSecretReference, TlsValidation,
};
use hubfed_e2e::{
    Federation, KUBEFED_NAMESPACE, TIMEOUT, Wait, apply, wait_clusters_ready, wait_for,
};
use k8s_openapi::ByteString;
use kube::Api;
use kube::api::DeleteParams;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Resolvable by nobody but the test's proxy, and in no certificate.
const WRONG_HOST: &str = "member1.hubfed-tls.invalid";

/// An HTTP CONNECT proxy on loopback that tunnels `WRONG_HOST:<port>` to 127.0.0.1:<port> and
/// refuses every other target. Stops when dropped.
struct ConnectProxy {
    url: String,
    task: JoinHandle<()>,
}

impl ConnectProxy {
    async fn start(port: u16) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    // A failed tunnel shows up as the member's probe error.
                    let _ = tunnel(client, port).await;
                });
            }
        });
        Ok(Self { url, task })
    }
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn tunnel(mut client: TcpStream, port: u16) -> anyhow::Result<()> {
    // The client sends nothing after the head until it has the answer: read it bytewise.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        ensure!(head.len() < 8192, "request head too long");
        head.push(client.read_u8().await?);
    }
    let head = String::from_utf8_lossy(&head);
    let expected = format!("CONNECT {WRONG_HOST}:{port} HTTP/1.1");
    if head.lines().next() != Some(expected.as_str()) {
        client.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n").await?;
        bail!("unexpected request {head:?}");
    }
    let mut upstream = TcpStream::connect(("127.0.0.1", port)).await?;
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// Waits until KubeFedCluster `name` is `Offline=True` with a message containing `error`.
async fn wait_offline_with(
    clusters: &Api<KubeFedCluster>,
    name: &str,
    error: &str,
) -> anyhow::Result<()> {
    wait_for(
        &format!("KubeFedCluster {name} Offline because of {error:?}"),
        TIMEOUT,
        async || {
            let cluster = clusters
                .get_opt(name)
                .await?
                .with_context(|| format!("KubeFedCluster {name} disappeared"))?;
            if cluster.is_ready() {
                bail!("{name} is Ready: its certificate was accepted");
            }
            let offline = cluster
                .status
                .as_ref()
                .and_then(|status| status.condition(ClusterConditionType::Offline));
            Ok(match offline {
                Some(condition)
                    if condition.status == "True"
                        && condition
                            .message
                            .as_deref()
                            .is_some_and(|message| message.contains(error)) =>
                {
                    Wait::Done(())
                }
                other => Wait::Pending(format!("Offline condition {other:?}")),
            })
        },
    )
    .await
}

#[tokio::test]
async fn subject_name_skips_only_the_host_name_check() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let member1 = fed.cluster("member1")?;
    let other_ca = fed.cluster("member2")?.ca_pem();
    let port: u16 = member1
        .server_url()
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .context("member1's URL has no port")?;
    let proxy = ConnectProxy::start(port).await?;

    let hub = fed.hub().await?;
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    // The harness's token for member1 serves every cluster here.
    let secret = clusters.get("member1").await?.spec.secret_ref.name;
    let cases = [
        ("tls-verified", vec![], member1.ca_pem()),
        ("tls-subject-name", vec![SubjectName], member1.ca_pem()),
        (
            "tls-validity-period",
            vec![ValidityPeriod],
            member1.ca_pem(),
        ),
        ("tls-other-ca", vec![SubjectName, ValidityPeriod], other_ca),
    ];
    for (name, disabled, ca) in &cases {
        let mut cluster = KubeFedCluster::new(
            name,
            KubeFedClusterSpec {
                api_endpoint: format!("https://{WRONG_HOST}:{port}"),
                ca_bundle: Some(ByteString(ca.as_bytes().to_vec())),
                secret_ref: LocalSecretReference {
                    name: secret.clone(),
                },
                disabled_tls_validations: disabled.clone(),
                proxy_url: proxy.url.clone(),
                sync_mode: Default::default(),
            },
        );
        cluster.metadata.namespace = Some(KUBEFED_NAMESPACE.to_owned());
        apply(&clusters, &cluster).await?;
    }

    let result = async {
        wait_clusters_ready(&hub, &["tls-subject-name"]).await?;
        let name_error = format!("not valid for name \"{WRONG_HOST}\"");
        wait_offline_with(&clusters, "tls-verified", &name_error).await?;
        wait_offline_with(&clusters, "tls-validity-period", &name_error).await?;
        wait_offline_with(&clusters, "tls-other-ca", "UnknownIssuer").await?;
        // Still Ready after the others have been probed: not a lucky first probe.
        let relaxed = clusters.get("tls-subject-name").await?;
        ensure!(
            relaxed.is_ready()
                && relaxed
                    .status
                    .is_some_and(|s| s.kubernetes_version.is_some_and(|v| !v.is_empty())),
            "tls-subject-name is no longer Ready with a kubernetesVersion"
        );
        Ok(())
    }
    .await;
    for (name, _, _) in &cases {
        clusters.delete(name, &DeleteParams::default()).await?;
    }
    result
}
