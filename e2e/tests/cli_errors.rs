//! `hubfedctl` on bad input, in process against its own clusters and controller: the one-line
//! error and the documented exit code of each, broken kubeconfig contexts included.

use std::path::Path;

use anyhow::ensure;
use hubfed_e2e::cli::{cli_federation, run_hubfedctl, troubled_kubeconfig};

/// Every bad input ends in one `error: ...` line on stderr and the documented exit code.
#[tokio::test]
async fn bad_input_is_one_error_line_and_an_exit_code() -> anyhow::Result<()> {
    let fixture = cli_federation();
    let hub = fixture.client("hub").await?;
    let kubeconfig = troubled_kubeconfig(fixture, &hub).await?;
    let kc = kubeconfig.as_path();
    let path = kc.display().to_string();
    let cases: Vec<(Vec<&str>, i32, String)> = vec![
        (
            vec!["join", "member9"],
            1,
            format!("cluster \"member9\": context \"member9\" not found in kubeconfig {path}"),
        ),
        (
            vec!["get", "clusters", "--host-cluster-context", "nope"],
            1,
            "hub cluster \"nope\": context \"nope\" not found".to_owned(),
        ),
        (
            vec!["join", "dead"],
            1,
            "cluster \"dead\": cannot reach https://127.0.0.1:".to_owned(),
        ),
        (
            vec!["enable", "nosuchtype"],
            1,
            "unknown type \"nosuchtype\": the hub cluster serves no such resource".to_owned(),
        ),
        (
            vec!["federate", "statefulsets", "web"],
            1,
            "type \"statefulsets.apps\" is not enabled for federation; run: hubfedctl enable statefulsets.apps".to_owned(),
        ),
        (
            vec!["federate", "configmap", "nope", "-n", "default"],
            1,
            "hub cluster \"hub\": configmap default/nope not found".to_owned(),
        ),
        (
            vec!["orphaning-deletion", "status", "configmaps", "nope", "-n", "default"],
            1,
            "federatedconfigmap default/nope not found".to_owned(),
        ),
        (
            vec!["unjoin", "member7", "--cluster-context", "member1"],
            1,
            "cluster \"member7\" is not joined".to_owned(),
        ),
        (
            vec!["get", "clusters", "--host-cluster-context", "nobody"],
            1,
            "hub cluster \"nobody\": permission denied: kubefedclusters.core.kubefed.io is forbidden".to_owned(),
        ),
        (
            vec!["get", "clusters", "--host-cluster-context", "bogus"],
            1,
            "hub cluster \"bogus\": the credentials were rejected (401 Unauthorized)".to_owned(),
        ),
        (
            vec!["federate", "configmap", "settings", "--contents"],
            2,
            "--contents only applies to namespaces".to_owned(),
        ),
        (
            vec!["join", "Member_1"],
            2,
            "cluster name \"Member_1\" is not a valid name".to_owned(),
        ),
        (vec!["join"], 2, "required arguments were not provided: <CLUSTER>".to_owned()),
        (vec!["bogus"], 2, "unrecognized subcommand 'bogus'".to_owned()),
        (
            vec!["federate", "-f", "x.yaml", "configmap", "x"],
            2,
            "cannot be used with".to_owned(),
        ),
    ];
    let mut failures = Vec::new();
    for (args, code, expected) in &cases {
        let run = run_hubfedctl(kc, args).await;
        if let Err(e) = run.fails_with(*code, expected) {
            failures.push(format!("hubfedctl {}: {e:#}", args.join(" ")));
        }
    }
    let missing = run_hubfedctl(Path::new("/nonexistent/kubeconfig"), &["get", "clusters"]).await;
    if let Err(e) = missing.fails_with(
        1,
        "cannot read kubeconfig /nonexistent/kubeconfig: no such file",
    ) {
        failures.push(format!("missing kubeconfig: {e:#}"));
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
