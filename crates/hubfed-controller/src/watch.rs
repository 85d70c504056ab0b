//! What the control plane's watch-driven loops share: the hub API of the control plane's
//! scope, the objects a cache's watch says to look at again ([`settled`]), a watch of one of
//! hubfed's own CRDs that waits quietly while the hub lacks it ([`quiet_while_unserved`]), the
//! stream of a watch channel's changes (the registry's, the settings'), a loop over a watch
//! stream that ends with its task, and a kube-runtime controller driven to its end.

use std::collections::HashSet;
use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use hubfed_core::placement::ControlPlaneScope;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{Controller, WatchStreamExt as _, watcher};
use kube::{Client, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::clusters::MemberClientPool;

/// A cache of `api`'s objects (as `config` selects them), kept until `shutdown`; its watch
/// errors are logged with the kind and retried with backoff.
pub(crate) fn spawn_cache<K>(
    api: Api<K>,
    config: watcher::Config,
    shutdown: CancellationToken,
) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config))
        .default_backoff()
        .applied_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                item = stream.next() => match item {
                    Some(Err(e)) => log_watch_error!(e, kind = %K::kind(&()), "hub watch error"),
                    Some(Ok(_)) => {}
                    None => break,
                },
            }
        }
    });
    reader
}

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
    registry_controller_of(hub, namespace, pool, shutdown, Served::Always)
}

/// Whether the hub serves a controller's type for sure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Served {
    /// KubeFed's and Kubernetes' types: a watch error is logged.
    Always,
    /// One of hubfed's own CRDs, which a hub taken over from KubeFed may lack: the watch waits
    /// quietly while it is not served ([`quiet_while_unserved`]).
    MaybeNot,
}

/// [`registry_controller`], its type's presence as `served` says.
pub(crate) fn registry_controller_of<K>(
    hub: &Client,
    namespace: Option<&str>,
    pool: &MemberClientPool,
    shutdown: &CancellationToken,
    served: Served,
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
    settled_controller_of(scoped(hub, namespace), watcher::Config::default(), served)
        .reconcile_all_on(changes(pool.subscribe()))
        .graceful_shutdown_on(shutdown.clone().cancelled_owned())
}

/// Whether [`settled`] hands on the objects that are gone as well.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Deletions {
    /// Only objects that exist: what a controller of those objects reconciles.
    Skip,
    /// Deleted objects too, and those a relist no longer shows: what a watch that looks at
    /// other objects because of these (their namespace, their source) needs.
    Include,
}

/// The objects to look at again, from the events of a cache's watch (`events`, the output of
/// [`reflector::reflector`] into `store`): each change as it comes and, once a (re)list has
/// ended, every object then in the cache — never the listed objects one by one as they
/// arrive. kube-runtime's cache takes a relist whole when it ends (`InitDone`); a reconcile
/// started on a relisted object before then reads the version the cache held before the
/// relist, and nothing looks at the object again once the cache has the new one. After a hub
/// API server restart, updates made while the watch was down were never propagated when the
/// relist came in pages (the federated objects' cache lists 50 a page).
///
/// With [`Deletions::Include`], deleted objects are handed on as well, and so are the objects
/// the cache held before a relist that the relist no longer shows (deleted while the watch was
/// down: no event ever says so). Errors are passed on.
pub(crate) fn settled<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    store: Store<K>,
    deletions: Deletions,
) -> impl Stream<Item = Result<Arc<K>, watcher::Error>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    // The cache as it was when a relist began: what the relist may no longer show.
    let mut before: Vec<Arc<K>> = Vec::new();
    events.flat_map(move |event| {
        let out: Vec<Result<Arc<K>, watcher::Error>> = match event {
            Ok(watcher::Event::Apply(object)) => vec![Ok(Arc::new(object))],
            Ok(watcher::Event::Delete(object)) if deletions == Deletions::Include => {
                vec![Ok(Arc::new(object))]
            }
            Ok(watcher::Event::Init) if deletions == Deletions::Include => {
                before = store.state();
                Vec::new()
            }
            Ok(watcher::Event::InitDone) => {
                let now = store.state();
                let gone = if deletions == Deletions::Include {
                    let present: HashSet<(Option<String>, String)> =
                        now.iter().map(|o| (o.namespace(), o.name_any())).collect();
                    std::mem::take(&mut before)
                        .into_iter()
                        .filter(|o| !present.contains(&(o.namespace(), o.name_any())))
                        .collect()
                } else {
                    Vec::new()
                };
                now.into_iter().chain(gone).map(Ok).collect()
            }
            Ok(watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::Delete(_)) => {
                Vec::new()
            }
            Err(e) => vec![Err(e)],
        };
        futures::stream::iter(out)
    })
}

/// Whether a watch `error` says the hub does not serve the watched type (a 404 on its list or
/// watch: its CRD is not installed).
pub(crate) fn unserved(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 404,
        watcher::Error::WatchError(status) => status.code == 404,
        _ => false,
    }
}

/// Whether a watch error is the routine end of a watch whose history the API server no
/// longer holds (410 Gone, "too old resource version"): the watcher lists again by itself.
/// client-go's reflector logs it only at a debug level, and so does [`log_watch_error`].
pub(crate) fn history_expired(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// Logs a watch error: a warning, or a debug line when the watch's history expired
/// ([`history_expired`]). Fields and message as `tracing`'s macros take them.
macro_rules! log_watch_error {
    ($error:expr, $($rest:tt)+) => {
        if $crate::watch::history_expired(&$error) {
            tracing::debug!(error = %$error, $($rest)+)
        } else {
            tracing::warn!(error = %$error, $($rest)+)
        }
    };
}
pub(crate) use log_watch_error;

/// A watch of one of hubfed's own CRDs that waits quietly while the hub does not serve it.
///
/// `events` is a kube watcher's stream before any backoff. A hub taken over from KubeFed may
/// lack the CRD ([`crate::hub_crds`] says so once). While the watch answers that the type is
/// not served ([`unserved`]), nothing is logged and it tries again after 1 s, doubling to
/// [`crate::hub_crds::RECHECK_MAX`]. The first such answer empties the cache and counts as its
/// list (an `Init` and an `InitDone`), so that what waits for the cache goes on with none of
/// these objects. Once the type is served the watch lists and goes on as any other. Other
/// errors are passed on, for the caller's backoff and log.
pub(crate) fn quiet_while_unserved<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    kind: String,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Send + 'static,
{
    struct State<S> {
        events: std::pin::Pin<Box<S>>,
        kind: String,
        unserved: bool,
        /// The last wait after an answer that the type is not served.
        wait: Option<Duration>,
        /// A wait to sit out before the watch is polled again.
        pending: Option<Duration>,
    }
    let state = State {
        events: Box::pin(events),
        kind,
        unserved: false,
        wait: None,
        pending: None,
    };
    futures::stream::unfold(state, |mut state| async move {
        if let Some(wait) = state.pending.take() {
            tokio::time::sleep(wait).await;
        }
        loop {
            match state.events.next().await? {
                Err(e) if unserved(&e) => {
                    let wait = state.wait.map_or(Duration::from_secs(1), |w| {
                        (w * 2).min(crate::hub_crds::RECHECK_MAX)
                    });
                    state.wait = Some(wait);
                    debug!(kind = %state.kind, error = %e, "not served by the hub; looking again in {wait:?}");
                    if !state.unserved {
                        state.unserved = true;
                        state.pending = Some(wait);
                        let emptied = vec![Ok(watcher::Event::Init), Ok(watcher::Event::InitDone)];
                        return Some((emptied, state));
                    }
                    tokio::time::sleep(wait).await;
                }
                item => {
                    if item.is_ok() {
                        state.unserved = false;
                        state.wait = None;
                    }
                    return Some((vec![item], state));
                }
            }
        }
    })
    .flat_map(futures::stream::iter)
}

/// A kube-runtime controller of `api`'s objects (`config` selects them) whose reconciles read
/// a relist's objects only once the cache holds them ([`settled`]). Its watch retries with
/// kube's default backoff and its errors are logged with the kind, without pausing the
/// controller's other triggers (kube's controller backs off all of them on a watch error).
pub(crate) fn settled_controller<K>(api: Api<K>, config: watcher::Config) -> Controller<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Clone + Eq + std::hash::Hash + Unpin,
{
    settled_controller_of(api, config, Served::Always)
}

/// [`settled_controller`], its type's presence as `served` says.
fn settled_controller_of<K>(api: Api<K>, config: watcher::Config, served: Served) -> Controller<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Clone + Eq + std::hash::Hash + Unpin,
{
    let writer = reflector::store::Writer::default();
    let store = writer.as_reader();
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let watch = watcher(api, config);
    let events = match served {
        Served::Always => reflector::reflector(writer, watch.default_backoff()).boxed(),
        Served::MaybeNot => {
            let quiet = quiet_while_unserved(watch, kind.clone());
            reflector::reflector(writer, quiet.default_backoff()).boxed()
        }
    };
    Controller::for_shared_stream(
        settled_objects(settled(events, store.clone(), Deletions::Skip), kind),
        store,
    )
}

/// The objects of a [`settled`] stream, its errors logged as watch errors of `kind`.
pub(crate) fn settled_objects<K>(
    objects: impl Stream<Item = Result<Arc<K>, watcher::Error>>,
    kind: String,
) -> impl Stream<Item = Arc<K>> {
    objects.filter_map(move |item| {
        std::future::ready(match item {
            Ok(object) => Some(object),
            Err(e) => {
                log_watch_error!(e, kind = %kind, "watch error");
                None
            }
        })
    })
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

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::watcher::Event;

    use super::*;

    #[test]
    fn an_expired_history_is_routine_and_other_errors_are_not() {
        let status = |code| {
            Box::new(kube::core::Status {
                code,
                ..kube::core::Status::default()
            })
        };
        assert!(history_expired(&watcher::Error::WatchError(status(410))));
        assert!(!history_expired(&watcher::Error::WatchError(status(500))));
        assert!(!history_expired(&watcher::Error::WatchError(status(404))));
        assert!(!history_expired(&watcher::Error::NoResourceVersion));
    }

    fn config_map(name: &str, version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("ns".to_owned()),
                resource_version: Some(version.to_owned()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    /// What `settled` hands on for `events` run through a cache, with the cache's version of
    /// each object at the time it is handed on (what a reconcile started then would read).
    async fn run(
        events: Vec<Event<ConfigMap>>,
        deletions: Deletions,
    ) -> Vec<(String, String, Option<String>)> {
        let writer = reflector::store::Writer::<ConfigMap>::default();
        let store = writer.as_reader();
        let events =
            reflector::reflector(writer, futures::stream::iter(events.into_iter().map(Ok)));
        let handed = settled(events, store.clone(), deletions);
        let mut handed = std::pin::pin!(handed);
        let mut seen = Vec::new();
        while let Some(object) = handed.next().await {
            let object = object.expect("no errors in these events");
            let cached = store
                .get(&reflector::ObjectRef::from_obj(&*object))
                .and_then(|o| o.resource_version());
            seen.push((
                object.name_any(),
                object.resource_version().unwrap_or_default(),
                cached,
            ));
        }
        seen
    }

    #[tokio::test]
    async fn a_relist_is_handed_on_once_the_cache_holds_it() {
        let seen = run(
            vec![
                Event::Init,
                Event::InitApply(config_map("a", "1")),
                Event::InitDone,
                // The watch broke; "a" changed meanwhile; the relist comes in pages.
                Event::Init,
                Event::InitApply(config_map("a", "2")),
                Event::InitApply(config_map("b", "3")),
                Event::InitDone,
                Event::Apply(config_map("b", "4")),
            ],
            Deletions::Skip,
        )
        .await;
        let mut first = seen[..1].to_vec();
        first.sort();
        assert_eq!(first, vec![("a".into(), "1".into(), Some("1".into()))]);
        let mut relisted = seen[1..3].to_vec();
        relisted.sort();
        assert_eq!(
            relisted,
            vec![
                ("a".into(), "2".into(), Some("2".into())),
                ("b".into(), "3".into(), Some("3".into())),
            ],
            "every relisted object, as the cache now holds it"
        );
        assert_eq!(seen[3], ("b".into(), "4".into(), Some("4".into())));
        assert_eq!(seen.len(), 4);
    }

    fn api_error(code: u16) -> watcher::Error {
        let status = kube::core::Status::failure(
            "the server could not find the requested resource",
            "NotFound",
        )
        .with_code(code);
        watcher::Error::InitialListFailed(kube::Error::Api(status.boxed()))
    }

    /// A type not served: one empty list, no errors, and looks again backing off; then,
    /// served, its watch as it comes. Other errors are passed on.
    #[tokio::test(start_paused = true)]
    async fn an_unserved_type_reads_as_an_empty_list_and_is_looked_for_quietly() {
        let events = vec![
            Err(api_error(404)),
            Err(api_error(404)),
            Err(api_error(404)),
            Ok(Event::Init),
            Ok(Event::InitApply(config_map("a", "1"))),
            Ok(Event::InitDone),
            Err(api_error(500)),
            Err(api_error(404)),
        ];
        let began = tokio::time::Instant::now();
        let quiet = quiet_while_unserved(futures::stream::iter(events), "ConfigMap".to_owned());
        let seen: Vec<String> = quiet
            .map(|item| match item {
                Ok(Event::Init) => "Init".to_owned(),
                Ok(Event::InitApply(o)) => format!("InitApply {}", o.name_any()),
                Ok(Event::InitDone) => "InitDone".to_owned(),
                Ok(_) => "other".to_owned(),
                Err(e) => format!("error {}", unserved(&e)),
            })
            .collect()
            .await;
        assert_eq!(
            seen,
            [
                "Init",
                "InitDone",
                "Init",
                "InitApply a",
                "InitDone",
                "error false",
                "Init",
                "InitDone"
            ]
        );
        // 1 s, 2 s and 4 s after the three first answers; 1 s again after the last.
        assert_eq!(began.elapsed(), Duration::from_secs(8));
    }

    #[tokio::test]
    async fn deletions_include_what_a_relist_no_longer_shows() {
        let events = vec![
            Event::Init,
            Event::InitApply(config_map("a", "1")),
            Event::InitApply(config_map("b", "2")),
            Event::InitDone,
            Event::Delete(config_map("a", "3")),
            // "b" deleted while the watch was down: the relist does not show it.
            Event::Init,
            Event::InitApply(config_map("c", "4")),
            Event::InitDone,
        ];
        let seen = run(events.clone(), Deletions::Include).await;
        let names: Vec<_> = seen.iter().map(|(name, _, _)| name.as_str()).collect();
        assert_eq!(names.len(), 5, "{seen:?}");
        assert_eq!(names[2], "a", "the deletion");
        let mut after_relist = names[3..].to_vec();
        after_relist.sort_unstable();
        assert_eq!(after_relist, vec!["b", "c"]);
        let seen = run(events, Deletions::Skip).await;
        let names: Vec<_> = seen.iter().map(|(name, _, _)| name.as_str()).collect();
        assert_eq!(names.len(), 3, "no deletions: {seen:?}");
        assert_eq!(names[2], "c");
    }
}
