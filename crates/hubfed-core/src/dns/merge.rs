//! KubeFed's `DedupeAndMergeEndpoints` (`pkg/controller/dnsendpoint/common.go`).

use std::collections::BTreeMap;

use hubfed_api::multiclusterdns::{Endpoint, RECORD_TYPE_CNAME};

/// Merges the endpoints of one name into one per record type, as KubeFed does.
///
/// Empty targets are dropped, and endpoints left without targets. Endpoints of one name and
/// type are merged, their targets sorted and deduplicated. A name with an address record
/// (`A`, or hubfed's `AAAA`) loses its CNAMEs: members sharing a zone or region where one has a
/// load balancer and another has none write both, and the address wins. The result is sorted
/// by name, then record type; the labels and TTL of a merged endpoint are its first one's
/// (KubeFed's endpoints of one record all share them).
pub fn merge_endpoints(endpoints: Vec<Endpoint>) -> Vec<Endpoint> {
    let mut by_name: BTreeMap<String, BTreeMap<String, Endpoint>> = BTreeMap::new();
    for mut endpoint in endpoints {
        endpoint.targets.retain(|target| !target.is_empty());
        if endpoint.targets.is_empty() {
            continue;
        }
        let types = by_name.entry(endpoint.dns_name.clone()).or_default();
        match types.get_mut(&endpoint.record_type) {
            Some(merged) => merged.targets.append(&mut endpoint.targets),
            None => {
                types.insert(endpoint.record_type.clone(), endpoint);
            }
        }
    }
    let mut merged = Vec::new();
    for (_, mut types) in by_name {
        if types
            .keys()
            .any(|record_type| record_type != RECORD_TYPE_CNAME)
        {
            types.remove(RECORD_TYPE_CNAME);
        }
        for (_, mut endpoint) in types {
            endpoint.targets.sort();
            endpoint.targets.dedup();
            merged.push(endpoint);
        }
    }
    merged
}
