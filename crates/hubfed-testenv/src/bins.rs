//! Where the pinned Kubernetes binaries and etcd are found.

use std::path::{Path, PathBuf};

use crate::Error;

/// The pinned Kubernetes release, shared with `hack/build-kube.sh`.
pub const KUBE_VERSION: &str = include_str!("../../../hack/KUBE_VERSION");

/// The pinned release as `vX.Y.Z`.
pub fn kube_version() -> String {
    format!("v{}", KUBE_VERSION.trim().trim_start_matches('v'))
}

fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"))
        .join("hubfed")
}

/// Paths of the binaries a test cluster runs.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
    /// `kube-scheduler`, next to the API server. Only environments that schedule pods
    /// ([`crate::TestEnvConfig::scheduling`]) need it: its presence is checked by
    /// [`Binaries::require_scheduler`], not by [`Binaries::locate`].
    pub kube_scheduler: PathBuf,
}

const KUBE_HINT: &str = "run `hack/build-kube.sh` (or `make tools`), or set HUBFED_KUBE_BIN_DIR";

impl Binaries {
    /// Finds the binaries: `HUBFED_KUBE_BIN_DIR` and `HUBFED_ETCD` when set, otherwise the
    /// caches `hack/build-kube.sh` and `hack/install-etcd.sh` fill, otherwise `etcd` on PATH.
    pub fn locate() -> Result<Self, Error> {
        let kube_dir = std::env::var_os("HUBFED_KUBE_BIN_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| cache_dir().join("kube").join(kube_version()));
        let kube_apiserver = kube_dir.join("kube-apiserver");
        let kube_controller_manager = kube_dir.join("kube-controller-manager");
        for bin in [&kube_apiserver, &kube_controller_manager] {
            if !bin.is_file() {
                return Err(Error::MissingBinary {
                    path: bin.clone(),
                    hint: KUBE_HINT,
                });
            }
        }
        let etcd = match std::env::var_os("HUBFED_ETCD") {
            Some(p) => PathBuf::from(p),
            None => {
                let cached = cache_dir().join("etcd/root/usr/bin/etcd");
                if cached.is_file() {
                    cached
                } else {
                    std::env::var_os("PATH")
                        .and_then(|paths| {
                            std::env::split_paths(&paths)
                                .map(|p| p.join("etcd"))
                                .find(|p| p.is_file())
                        })
                        .unwrap_or(cached)
                }
            }
        };
        if !etcd.is_file() {
            return Err(Error::MissingBinary {
                path: etcd,
                hint: "run `hack/install-etcd.sh` (or `make tools`), or set HUBFED_ETCD",
            });
        }
        Ok(Self {
            etcd,
            kube_scheduler: kube_dir.join("kube-scheduler"),
            kube_apiserver,
            kube_controller_manager,
        })
    }

    /// The `kube-scheduler` binary, or [`Error::MissingBinary`] when it is not there.
    pub fn require_scheduler(&self) -> Result<&Path, Error> {
        if self.kube_scheduler.is_file() {
            Ok(&self.kube_scheduler)
        } else {
            Err(Error::MissingBinary {
                path: self.kube_scheduler.clone(),
                hint: KUBE_HINT,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_scheduler_is_reported_only_when_required() {
        let bins = Binaries {
            etcd: PathBuf::from("/bin/sh"),
            kube_apiserver: PathBuf::from("/bin/sh"),
            kube_controller_manager: PathBuf::from("/bin/sh"),
            kube_scheduler: PathBuf::from("/nonexistent/kube-scheduler"),
        };
        match bins.require_scheduler() {
            Err(Error::MissingBinary { path, hint }) => {
                assert_eq!(path, bins.kube_scheduler);
                assert_eq!(hint, KUBE_HINT);
            }
            other => panic!("expected MissingBinary, got {other:?}"),
        }
    }
}
