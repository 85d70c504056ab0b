//! What the control plane's watch-driven loops share: the hub API of the control plane's
//! scope, the stream of a watch channel's changes (the registry's, the settings'), a loop over
//! a watch stream that ends with its task, and a kube-runtime controller driven to its end.

use std::fmt::Display;

use futures::{Stream, StreamExt as _};
use hubfed_core::placement::ControlPlaneScope;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{Controller, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::clusters::MemberClientPool;

/// The namespace the control plane watches in its `scope`: its own (`kubefed_namespace`),
/// or every namespace (`None`).
pub(crate) fn scope_namespace(scope: ControlPlaneScope, kubefed_namespace: &str) -> Option<&str> {
    match scope {
        ControlPlaneScope::Cluster => None,
        ControlPlaneScope::Namespaced => Some(kubefed_namespace),
    }
}

/// The hub's `K` in `namespace`, or in every namespace.
pub(crate) fn scoped<K>(hub: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(namespace) => Api::namespaced(hub.clone(), namespace),
        None => Api::all(hub.clone()),
    }
}

/// [`scoped`] for a dynamic `resource`.
pub(crate) fn scoped_with(
    hub: &Client,
    namespace: Option<&str>,
    resource: &ApiResource,
) -> Api<DynamicObject> {
    match namespace {
        Some(namespace) => Api::namespaced_with(hub.clone(), namespace, resource),
        None => Api::all_with(hub.clone(), resource),
    }
}

/// A kube-runtime controller of the hub's `K` in `namespace` (or every namespace) that looks
/// at every object again whenever the cluster registry (`pool`) changes, until `shutdown`.
pub(crate) fn registry_controller<K>(
    hub: &Client,
    namespace: Option<&str>,
    pool: &MemberClientPool,
    shutdown: &CancellationToken,
) -> Controller<K>
where
    K: Resource<Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Clone + Eq + std::hash::Hash + Unpin,
{
    Controller::new(scoped(hub, namespace), watcher::Config::default())
        .reconcile_all_on(changes(pool.subscribe()))
        .graceful_shutdown_on(shutdown.clone().cancelled_owned())
}

/// One item for every change seen on `changes`; ends when its sender is gone.
pub(crate) fn changes<T>(changes: watch::Receiver<T>) -> impl Stream<Item = ()>
where
    T: Send + Sync + 'static,
{
    futures::stream::unfold(changes, |mut changes| async move {
        changes.changed().await.ok()?;
        Some(((), changes))
    })
}

/// Hands every event of a watch `stream` to `handle` until the stream ends or `stop`.
pub(crate) async fn each_event<T>(
    stream: impl Stream<Item = Result<T, watcher::Error>>,
    stop: &CancellationToken,
    mut handle: impl FnMut(Result<T, watcher::Error>),
) {
    let mut stream = std::pin::pin!(stream);
    loop {
        let item = tokio::select! {
            () = stop.cancelled() => break,
            item = stream.next() => item,
        };
        let Some(item) = item else {
            break;
        };
        handle(item);
    }
}

/// Drives a kube-runtime controller's `results` to their end; a failed reconcile is logged
/// at debug level (its error policy has said what matters), as `controller`'s.
pub(crate) async fn drive<T, E: Display>(
    results: impl Stream<Item = Result<T, E>>,
    controller: &'static str,
) {
    results
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "{controller}");
            }
        })
        .await;
}
