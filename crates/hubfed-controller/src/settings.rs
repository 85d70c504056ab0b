//! The controller's run-time settings that do not come from the KubeFedConfig (flags): read by
//! `run` (wiring) and the sync controllers alike, owned by neither.

/// Run-time settings that do not come from KubeFedConfig.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Elect a leader through a Lease; only the leader runs the controllers and writes.
    pub leader_elect: bool,
    /// This replica's identity in the Lease; default `<hostname>_<random>`.
    pub identity: Option<String>,
    /// Namespace of FTCs, KubeFedClusters, their Secrets and the KubeFedConfig.
    pub kubefed_namespace: String,
    /// Concurrent writes to one member cluster.
    pub member_write_concurrency: usize,
    /// Concurrent reconciles per federated type (KubeFedConfig's
    /// `syncController.maxConcurrentReconciles` raises it, never lowers it).
    pub reconcile_concurrency: u16,
    /// Field managers whose changes to member copies are people's, reverted as drift
    /// (patterns, a trailing `*` matches any suffix; [`hubfed_core::drift`]).
    pub drift_revert_managers: Vec<String>,
    /// Seconds a pod must have been unschedulable before an RSP with `rebalance` moves its
    /// replica ([`hubfed_core::schedule::UNSCHEDULABLE_THRESHOLD_SECONDS`]).
    pub unschedulable_threshold: i64,
    /// MiB of room for large objects' writes in flight ([`hubfed_core::large_objects`]; 0: no budget).
    pub large_object_budget_mib: u32,
    /// Lists of members' objects into the caches running at a time, every type and member
    /// together (0: no limit; `crate::sync::list_slots`).
    pub member_list_concurrency: usize,
    /// Objects per page of a member list (kube-runtime's watcher and client-go's pager: 500).
    pub member_list_page_size: u32,
    /// How long a member list may get no page before it gives its slot back and goes on
    /// without one. Not a flag: tests shorten it.
    pub member_list_stall: std::time::Duration,
    /// Run the multi-cluster services controller (`crate::mcs`).
    pub mcs: bool,
    /// How long an Offline member's endpoints stay in the other members
    /// ([`hubfed_core::mcs::DEFAULT_ENDPOINT_TTL`]).
    pub mcs_endpoint_ttl: std::time::Duration,
    /// Run the multi-cluster DNS controller (`crate::dns`).
    pub dns: bool,
    /// The groups its DNSEndpoints are written in.
    pub dns_endpoint_groups: crate::dns::EndpointGroups,
}

/// Default of `--member-list-concurrency`.
pub const DEFAULT_MEMBER_LIST_CONCURRENCY: usize = 8;
/// Default of `--member-list-page-size`.
pub const DEFAULT_MEMBER_LIST_PAGE_SIZE: u32 = 500;
/// Default [`ControllerConfig::member_list_stall`].
pub const DEFAULT_MEMBER_LIST_STALL: std::time::Duration = std::time::Duration::from_secs(30);

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            leader_elect: false,
            identity: None,
            kubefed_namespace: hubfed_api::names::DEFAULT_KUBEFED_NAMESPACE.to_string(),
            member_write_concurrency: 16,
            reconcile_concurrency: 16,
            drift_revert_managers: hubfed_core::drift::DEFAULT_PEOPLE
                .iter()
                .map(|m| (*m).to_owned())
                .collect(),
            unschedulable_threshold: hubfed_core::schedule::UNSCHEDULABLE_THRESHOLD_SECONDS,
            large_object_budget_mib: hubfed_core::large_objects::DEFAULT_BUDGET_MIB,
            member_list_concurrency: DEFAULT_MEMBER_LIST_CONCURRENCY,
            member_list_page_size: DEFAULT_MEMBER_LIST_PAGE_SIZE,
            member_list_stall: DEFAULT_MEMBER_LIST_STALL,
            mcs: true,
            mcs_endpoint_ttl: hubfed_core::mcs::DEFAULT_ENDPOINT_TTL,
            dns: true,
            dns_endpoint_groups: crate::dns::EndpointGroups::default(),
        }
    }
}
