//! The statuses an object is written with, as a watch of it sees them: each distinct status in
//! order, with when it was seen — for tests of how often, and when, the controller writes one.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context as _;
use futures::StreamExt as _;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::TIMEOUT;

/// A status seen, and when.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at: Instant,
    pub status: Value,
}

/// The distinct statuses an object is seen with, in order, from a watch of it.
pub struct Statuses {
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl Statuses {
    /// Watches `name` in `api`; returns once the watch has listed.
    pub async fn watch<K>(api: Api<K>, name: &str) -> anyhow::Result<Self>
    where
        K: kube::Resource
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + serde::Serialize,
        K: Send + 'static,
    {
        let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
        let (listed, synced) = tokio::sync::oneshot::channel::<()>();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let record = seen.clone();
        let task = tokio::spawn(async move {
            let mut listed = Some(listed);
            let mut events = watcher(api, config).default_backoff().boxed();
            while let Some(event) = events.next().await {
                let object = match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
                    Ok(watcher::Event::InitDone) => {
                        if let Some(listed) = listed.take() {
                            let _ = listed.send(());
                        }
                        continue;
                    }
                    _ => continue,
                };
                let Ok(object) = serde_json::to_value(&object) else {
                    continue;
                };
                let status = &object["status"];
                if status.is_null() {
                    continue;
                }
                let mut seen = record.lock().unwrap_or_else(|e| e.into_inner());
                if seen.last().map(|s| &s.status) != Some(status) {
                    seen.push(Seen {
                        at: Instant::now(),
                        status: status.clone(),
                    });
                }
            }
        });
        tokio::time::timeout(TIMEOUT, synced)
            .await
            .context("the watch did not list in time")??;
        Ok(Self { seen, task })
    }

    /// Stops the watch; the statuses it saw.
    pub fn stop(self) -> Vec<Value> {
        self.stop_timed().into_iter().map(|s| s.status).collect()
    }

    /// Stops the watch; the statuses it saw, each with when.
    pub fn stop_timed(self) -> Vec<Seen> {
        self.task.abort();
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
