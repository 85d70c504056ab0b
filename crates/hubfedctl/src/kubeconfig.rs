//! Kubeconfig handling as kubectl does it: `--kubeconfig`, else `$KUBECONFIG` (a list of
//! files, merged), else `~/.kube/config`; contexts by name, the current one by default.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use kube::config::{KubeConfigOptions, Kubeconfig, NamedCluster, NamedContext};

use crate::error::{Error, Result};

/// A loaded kubeconfig and where it came from (for messages).
pub struct KubeconfigFile {
    config: Kubeconfig,
    /// The file, or the `$KUBECONFIG` list, it was read from.
    origin: String,
}

/// What a KubeFedCluster needs from a kubeconfig cluster entry (docs/kubefed-compatibility.md §3,
/// `join`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterEndpoint {
    pub server: String,
    /// PEM CA bundle from `certificate-authority-data` or the `certificate-authority` file.
    pub ca_pem: Option<Vec<u8>>,
    pub insecure_skip_tls_verify: bool,
    pub proxy_url: Option<String>,
}

/// One cluster as the CLI talks to it: a client and what to call it in messages.
#[derive(Clone)]
pub struct Target {
    /// E.g. `cluster "member1"` or `hub cluster "hub"`.
    pub subject: String,
    /// The API server URL.
    pub url: String,
    pub client: kube::Client,
    /// The context's namespace, `default` when it names none.
    pub default_namespace: String,
}

impl Target {
    /// Maps a kube error of a request to this cluster.
    pub fn err(&self, error: kube::Error) -> Error {
        Error::kube(&self.subject, &self.url, error)
    }
}

impl KubeconfigFile {
    /// Reads `explicit`, else `$KUBECONFIG`, else `~/.kube/config`.
    pub fn load(explicit: Option<&Path>) -> Result<Self> {
        let read_error = |origin: &str, e: kube::config::KubeconfigError| Error::Kubeconfig {
            path: origin.to_owned(),
            reason: crate::error::one_line(&e.to_string()),
        };
        if let Some(path) = explicit {
            let origin = path.display().to_string();
            if !path.exists() {
                return Err(Error::Kubeconfig {
                    path: origin,
                    reason: "no such file".to_owned(),
                });
            }
            let config = Kubeconfig::read_from(path).map_err(|e| read_error(&origin, e))?;
            return Ok(Self { config, origin });
        }
        if let Some(list) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
            let origin = list.to_string_lossy().into_owned();
            if let Some(config) = Kubeconfig::from_env().map_err(|e| read_error(&origin, e))? {
                return Ok(Self { config, origin });
            }
        }
        let default = home_kubeconfig().ok_or_else(|| Error::Kubeconfig {
            path: "~/.kube/config".to_owned(),
            reason: "no home directory; pass --kubeconfig".to_owned(),
        })?;
        let origin = default.display().to_string();
        if !default.exists() {
            return Err(Error::Kubeconfig {
                path: origin,
                reason: "no such file; pass --kubeconfig or set KUBECONFIG".to_owned(),
            });
        }
        let config = Kubeconfig::read_from(&default).map_err(|e| read_error(&origin, e))?;
        Ok(Self { config, origin })
    }

    /// Where the kubeconfig came from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// `current-context`, if set.
    pub fn current_context(&self) -> Option<&str> {
        self.config
            .current_context
            .as_deref()
            .filter(|c| !c.is_empty())
    }

    fn context(&self, subject: &str, name: &str) -> Result<&NamedContext> {
        self.config
            .contexts
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| Error::ContextNotFound {
                subject: subject.to_owned(),
                context: name.to_owned(),
                path: self.origin.clone(),
            })
    }

    fn bad_context(&self, subject: &str, context: &str, reason: impl Into<String>) -> Error {
        Error::BadContext {
            subject: subject.to_owned(),
            context: context.to_owned(),
            path: self.origin.clone(),
            reason: reason.into(),
        }
    }

    fn cluster_entry(&self, subject: &str, context: &str) -> Result<&NamedCluster> {
        let named = self.context(subject, context)?;
        let cluster_name = named
            .context
            .as_ref()
            .map(|c| c.cluster.as_str())
            .unwrap_or_default();
        self.config
            .clusters
            .iter()
            .find(|c| c.name == cluster_name)
            .ok_or_else(|| {
                self.bad_context(
                    subject,
                    context,
                    format!("its cluster {cluster_name:?} is not defined"),
                )
            })
    }

    /// Server, CA, TLS and proxy settings of `context`'s cluster.
    pub fn endpoint(&self, subject: &str, context: &str) -> Result<ClusterEndpoint> {
        let named = self.cluster_entry(subject, context)?;
        let cluster = named.cluster.clone().unwrap_or_default();
        let server = cluster
            .server
            .filter(|s| !s.is_empty())
            .ok_or_else(|| self.bad_context(subject, context, "its cluster has no server"))?;
        let ca_pem = match (
            cluster.certificate_authority_data,
            cluster.certificate_authority,
        ) {
            (Some(data), _) if !data.is_empty() => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(data.trim())
                    .map_err(|_| {
                        self.bad_context(
                            subject,
                            context,
                            "certificate-authority-data is not base64",
                        )
                    })?,
            ),
            (_, Some(file)) if !file.is_empty() => Some(std::fs::read(&file).map_err(|e| {
                self.bad_context(subject, context, format!("cannot read {file}: {e}"))
            })?),
            _ => None,
        };
        Ok(ClusterEndpoint {
            server,
            ca_pem,
            insecure_skip_tls_verify: cluster.insecure_skip_tls_verify.unwrap_or(false),
            proxy_url: cluster.proxy_url.filter(|p| !p.is_empty()),
        })
    }

    /// A client for `context`; requests give up after `timeout` without an answer.
    pub async fn target(&self, subject: &str, context: &str, timeout: Duration) -> Result<Target> {
        self.context(subject, context)?;
        let options = KubeConfigOptions {
            context: Some(context.to_owned()),
            ..KubeConfigOptions::default()
        };
        let mut config = kube::Config::from_custom_kubeconfig(self.config.clone(), &options)
            .await
            .map_err(|e| {
                self.bad_context(subject, context, crate::error::one_line(&e.to_string()))
            })?;
        config.connect_timeout = Some(timeout.min(Duration::from_secs(10)));
        config.read_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
        let url = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_owned();
        let default_namespace = config.default_namespace.clone();
        let client = kube::Client::try_from(config).map_err(|e| {
            self.bad_context(subject, context, crate::error::one_line(&e.to_string()))
        })?;
        Ok(Target {
            subject: subject.to_owned(),
            url,
            client,
            default_namespace,
        })
    }
}

fn home_kubeconfig() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| PathBuf::from(home).join(".kube").join("config"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
apiVersion: v1
kind: Config
current-context: hub
clusters:
- name: hub
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: LS0tLS1CRUdJTg==
- name: far
  cluster:
    server: https://far.example:443
    insecure-skip-tls-verify: true
    proxy-url: socks5://proxy:1080
contexts:
- name: hub
  context: {cluster: hub, user: admin}
- name: far
  context: {cluster: far, user: admin, namespace: apps}
- name: broken
  context: {cluster: nowhere, user: admin}
users:
- name: admin
  user: {token: secret}
"#;

    fn file() -> KubeconfigFile {
        KubeconfigFile {
            config: Kubeconfig::from_yaml(CONFIG).unwrap(),
            origin: "/tmp/kc".to_owned(),
        }
    }

    #[test]
    fn endpoints_carry_ca_tls_and_proxy_settings() {
        let kc = file();
        assert_eq!(kc.current_context(), Some("hub"));
        let hub = kc.endpoint("hub cluster \"hub\"", "hub").unwrap();
        assert_eq!(hub.server, "https://127.0.0.1:6443");
        assert_eq!(hub.ca_pem.as_deref(), Some(&b"-----BEGIN"[..]));
        assert!(!hub.insecure_skip_tls_verify && hub.proxy_url.is_none());
        let far = kc.endpoint("cluster \"far\"", "far").unwrap();
        assert!(far.insecure_skip_tls_verify && far.ca_pem.is_none());
        assert_eq!(far.proxy_url.as_deref(), Some("socks5://proxy:1080"));
    }

    #[test]
    fn unknown_and_broken_contexts_are_named() {
        let kc = file();
        let missing = kc.endpoint("cluster \"member9\"", "member9").unwrap_err();
        assert_eq!(
            missing.to_string(),
            "cluster \"member9\": context \"member9\" not found in kubeconfig /tmp/kc"
        );
        let broken = kc.endpoint("cluster \"b\"", "broken").unwrap_err();
        assert!(
            broken
                .to_string()
                .contains("its cluster \"nowhere\" is not defined"),
            "{broken}"
        );
    }
}
