//! Load-balancer targets, and how host names among them become addresses.
//!
//! A load balancer named by a host name (AWS's ELBs) is written as the addresses the name
//! resolves to, as KubeFed did, rather than as a CNAME of it. A CNAME cannot share its name
//! with any other record, so the global and region names, which merge the load balancers of
//! several members, could only ever alias one of them; address records merge. The cost is that
//! the records follow a change of the load balancer's addresses only when the record is next
//! reconciled. The lookup is the caller's ([`HostResolver`]): the controller resolves
//! [`load_balancer_hostnames`] before calling in, tests use a table ([`ResolvedHosts`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::LoadBalancerStatus;

/// Resolves a host name to its addresses, as Go's `net.LookupHost` does.
pub trait HostResolver {
    /// The addresses of `host`, or why there are none.
    fn lookup_host(&self, host: &str) -> Result<Vec<String>, String>;
}

impl<F> HostResolver for F
where
    F: Fn(&str) -> Result<Vec<String>, String>,
{
    fn lookup_host(&self, host: &str) -> Result<Vec<String>, String> {
        self(host)
    }
}

/// Host names resolved beforehand: a host name missing from the table does not resolve.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvedHosts(pub BTreeMap<String, Result<Vec<String>, String>>);

impl HostResolver for ResolvedHosts {
    fn lookup_host(&self, host: &str) -> Result<Vec<String>, String> {
        self.0
            .get(host)
            .cloned()
            .unwrap_or_else(|| Err("not looked up".to_owned()))
    }
}

/// KubeFed's `ExtractLoadBalancerTargets`: each ingress point's IP, then its host name.
pub fn load_balancer_targets(load_balancer: &LoadBalancerStatus) -> Vec<String> {
    let mut targets = Vec::new();
    for ingress in load_balancer.ingress.iter().flatten() {
        for value in [&ingress.ip, &ingress.hostname].into_iter().flatten() {
            if !value.is_empty() {
                targets.push(value.clone());
            }
        }
    }
    targets
}

/// The targets of `load_balancers` that are not IP addresses, which are looked up.
pub fn load_balancer_hostnames<'a>(
    load_balancers: impl IntoIterator<Item = &'a LoadBalancerStatus>,
) -> BTreeSet<String> {
    load_balancers
        .into_iter()
        .flat_map(load_balancer_targets)
        .filter(|target| target.parse::<IpAddr>().is_err())
        .collect()
}

/// A load balancer's addresses, IPv4 and IPv6 apart, each sorted and without duplicates.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Addresses {
    pub v4: BTreeSet<String>,
    pub v6: BTreeSet<String>,
}

impl Addresses {
    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    pub fn extend(&mut self, other: &Addresses) {
        self.v4.extend(other.v4.iter().cloned());
        self.v6.extend(other.v6.iter().cloned());
    }

    fn insert(&mut self, address: String, ip: IpAddr) {
        match ip {
            IpAddr::V4(_) => self.v4.insert(address),
            IpAddr::V6(_) => self.v6.insert(address),
        };
    }
}

/// A host name that did not resolve to any address, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Unresolved {
    pub hostname: String,
    pub error: String,
}

/// KubeFed's `getResolvedTargets`: IP addresses kept, host names replaced by their addresses.
///
/// A host name that fails to resolve, or resolves to nothing usable, is left out and returned
/// beside the addresses (KubeFed failed the whole record on it).
pub(super) fn resolve_targets(
    targets: &[String],
    resolver: &dyn HostResolver,
) -> (Addresses, Vec<Unresolved>) {
    let mut addresses = Addresses::default();
    let mut unresolved = Vec::new();
    for target in targets {
        if let Ok(ip) = target.parse::<IpAddr>() {
            addresses.insert(target.clone(), ip);
            continue;
        }
        let found = resolver.lookup_host(target).and_then(|found| {
            let usable: Vec<(String, IpAddr)> = found
                .into_iter()
                .filter_map(|a| a.parse::<IpAddr>().ok().map(|ip| (a, ip)))
                .collect();
            if usable.is_empty() {
                Err("no address".to_owned())
            } else {
                Ok(usable)
            }
        });
        match found {
            Ok(found) => {
                for (address, ip) in found {
                    addresses.insert(address, ip);
                }
            }
            Err(error) => unresolved.push(Unresolved {
                hostname: target.clone(),
                error,
            }),
        }
    }
    (addresses, unresolved)
}
