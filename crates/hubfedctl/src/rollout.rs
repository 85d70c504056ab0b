//! `rollout status|pause|resume|abort KIND/NAME`: staged rollouts of a federated object under a
//! RolloutStrategy. Pause and abort are the annotation `hubfed.io/rollout: paused|aborted` on
//! the federated object, an abort with the revision it belongs to
//! (`hubfed.io/rollout-aborted-revision`; resume removes both; the controller removes an abort
//! once a new revision starts a fresh rollout); status reads the state the controller stores in
//! a ConfigMap of the control plane's namespace (named by [`hubfed_core::rollout::state_name`],
//! the controller's spelling).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use hubfed_core::rollout::{
    ABORT_REVISION_ANNOTATION, CONTROL_ANNOTATION, STRATEGY_ANNOTATION, state_name,
};

use crate::cli::RolloutCommand;
use crate::error::{Error, Result};
use crate::kubeconfig::Target;
use crate::session::Session;
use crate::types::{HubObject, hub_object};

pub async fn rollout(session: &mut Session<'_>, command: RolloutCommand) -> Result<()> {
    let (args, control) = match command {
        RolloutCommand::Status(args) => (args, None),
        RolloutCommand::Pause(args) => (args, Some(Value::from("paused"))),
        RolloutCommand::Resume(args) => (args, Some(Value::Null)),
        RolloutCommand::Abort(args) => (args, Some(Value::from("aborted"))),
    };
    let hub = session.hub().await?;
    let kubefed_ns = session.kubefed_namespace().to_owned();
    let found = hub_object(&hub, &kubefed_ns, &args.target, args.namespace.as_deref()).await?;
    let name = found.object.metadata.name.clone().unwrap_or_default();
    let resource = found.ftc.spec.federated_type.to_dynamic();
    let state_name = state_name(&resource.kind, found.namespace.as_deref(), &name);
    let stored = StoredState {
        hub: &hub,
        namespace: &kubefed_ns,
        name: &state_name,
    };
    let strategy = strategy(&found)?;
    match control {
        Some(control) => set_control(session, &stored, &found, &name, control).await,
        None => show_status(session, &stored, &found, &strategy).await,
    }
}

/// The RolloutStrategy the object rolls out under: its own annotation, else its
/// FederatedTypeConfig's.
fn strategy(found: &HubObject) -> Result<String> {
    let own = found.object.metadata.annotations.as_ref();
    let of_type = found.ftc.metadata.annotations.as_ref();
    own.and_then(|a| a.get(STRATEGY_ANNOTATION))
        .or_else(|| of_type.and_then(|a| a.get(STRATEGY_ANNOTATION)))
        .cloned()
        .ok_or_else(|| {
            Error::Refused(format!(
                "{} has no rollout strategy: annotate it (or its FederatedTypeConfig) with {STRATEGY_ANNOTATION}: <RolloutStrategy name>",
                found.shown
            ))
        })
}

/// The ConfigMap in the control plane's namespace where the controller keeps an object's
/// rollout state.
struct StoredState<'a> {
    hub: &'a Target,
    namespace: &'a str,
    name: &'a str,
}

impl StoredState<'_> {
    /// The stored state's text, if there is one.
    async fn read(&self) -> Result<Option<String>> {
        let maps: Api<ConfigMap> = Api::namespaced(self.hub.client.clone(), self.namespace);
        Ok(maps
            .get_opt(self.name)
            .await
            .map_err(|e| self.hub.err(e))?
            .and_then(|m| m.data)
            .and_then(|d| d.get("state").cloned()))
    }
}

/// Pause, resume or abort: the control annotation (`null` removes it) and, with an abort,
/// the revision it belongs to.
async fn set_control(
    session: &mut Session<'_>,
    stored: &StoredState<'_>,
    found: &HubObject,
    name: &str,
    control: Value,
) -> Result<()> {
    // An abort belongs to the revision being rolled out now (the stored state's): a later
    // revision is not aborted by it. Pause and resume lift it.
    let revision = if control == "aborted" {
        stored
            .read()
            .await?
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .and_then(|state| state["revision"].as_str().map(Value::from))
            .unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    let patch = json!({"metadata": {"annotations": {
        CONTROL_ANNOTATION: control,
        ABORT_REVISION_ANNOTATION: revision,
    }}});
    found
        .api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| stored.hub.err(e))?;
    let what = match control.as_str() {
        Some("paused") => "rollout paused",
        Some(_) => "rollout aborted: every cluster goes back to the stable revision",
        None => "rollout resumed (after an abort, the revision starts over at the first stage)",
    };
    session.say(format_args!("hub: {}: {what}", found.shown))
}

/// `rollout status`: the stored state as text, or why it cannot be read.
async fn show_status(
    session: &mut Session<'_>,
    stored: &StoredState<'_>,
    found: &HubObject,
    strategy: &str,
) -> Result<()> {
    let shown = &found.shown;
    let text = stored.read().await?.filter(|s| !s.is_empty());
    let state: Value = match text.as_deref().map(serde_json::from_str::<Value>) {
        None => Value::Null,
        Some(Ok(state)) => state,
        Some(Err(e)) => {
            return session.print(&format!(
                "{shown}: strategy {strategy}; the stored state {}/{} cannot be \
                 read ({e}): every change is held until it is mended or deleted\n",
                stored.namespace, stored.name
            ));
        }
    };
    let annotations = found.object.metadata.annotations.as_ref();
    let control = annotations
        .and_then(|a| a.get(CONTROL_ANNOTATION))
        .map_or("", String::as_str);
    session.print(&render(shown, strategy, &state, control))
}

/// The status text.
fn render(shown: &str, strategy: &str, state: &Value, control: &str) -> String {
    if state.is_null() {
        return format!(
            "{shown}: strategy {strategy}; no rollout yet (the first change after the strategy was set starts one)\n"
        );
    }
    let text = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    let mut out = format!(
        "{shown}: strategy {strategy}, revision {} ({}), batch {}, stable revision {}\n",
        text(&state["revision"]),
        text(&state["phase"]),
        state["batch"]
            .as_u64()
            .map_or("-".to_owned(), |b| (b + 1).to_string()),
        text(&state["stable"]),
    );
    if let Some(why) = state["halted"].as_str() {
        out.push_str(&format!("halted: {why}\n"));
    }
    if let Some(why) = state["held"].as_str() {
        out.push_str(&format!("held: {why}\n"));
    }
    if let Some(why) = state["unstaged"].as_str() {
        out.push_str(&format!("not staged: {why}\n"));
    }
    // The stored membership: which clusters each batch holds and whether they have it.
    let completed = state["phase"] == "Completed";
    let reached: Vec<&str> = state["reached"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for (i, batch) in state["batches"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let clusters: Vec<&str> = batch["clusters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let given = clusters.iter().filter(|c| reached.contains(c)).count();
        let how = match given {
            _ if completed => "given the revision",
            0 => "waiting",
            n if n == clusters.len() => "given the revision",
            _ => "partly given the revision",
        };
        out.push_str(&format!(
            "  batch {} ({}): {} - {how}\n",
            i + 1,
            text(&batch["stage"]),
            if clusters.is_empty() {
                "-".to_owned()
            } else {
                clusters.join(", ")
            }
        ));
    }
    for (cluster, error) in state["failures"].as_object().into_iter().flatten() {
        out.push_str(&format!("apply failed in {cluster}: {}\n", text(error)));
    }
    if !control.is_empty() {
        out.push_str(&format!("{CONTROL_ANNOTATION}: {control}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_text() {
        let state = json!({"revision": "abc-def", "stable": "123-456", "batch": 0, "phase": "Halted", "halted": "member1: not Ready on abc-def within 60s"});
        assert_eq!(
            render("FederatedDeployment shop/web", "canary", &state, ""),
            "FederatedDeployment shop/web: strategy canary, revision abc-def (Halted), batch 1, stable revision 123-456\nhalted: member1: not Ready on abc-def within 60s\n"
        );
        assert!(render("x", "s", &Value::Null, "").contains("no rollout yet"));
        let held = json!({"revision": "r", "phase": "Completed", "batch": 0, "held": "RolloutStrategy x/s not found: changes are held back"});
        assert!(
            render("x", "s", &held, "")
                .contains("\nheld: RolloutStrategy x/s not found: changes are held back\n")
        );
        let unstaged =
            json!({"revision": "r", "phase": "Completed", "batch": 0, "unstaged": "too large"});
        assert!(render("x", "s", &unstaged, "").contains("\nnot staged: too large\n"));
        let state = json!({
            "revision": "abc-def-123", "stable": "123-456-789", "batch": 1, "phase": "Paused",
            "batches": [
                {"stage": "canary", "clusters": ["member1"]},
                {"stage": "eu", "clusters": ["eu1", "eu2"]},
                {"stage": "rest", "clusters": ["us1"]},
            ],
            "reached": ["member1", "eu1"],
            "failures": {"eu1": "UpdateFailed: denied"},
        });
        assert_eq!(
            render("FederatedDeployment shop/web", "canary", &state, "paused"),
            "FederatedDeployment shop/web: strategy canary, revision abc-def-123 (Paused), batch 2, stable revision 123-456-789\n\
             \x20 batch 1 (canary): member1 - given the revision\n\
             \x20 batch 2 (eu): eu1, eu2 - partly given the revision\n\
             \x20 batch 3 (rest): us1 - waiting\n\
             apply failed in eu1: UpdateFailed: denied\n\
             hubfed.io/rollout: paused\n"
        );
    }
}
