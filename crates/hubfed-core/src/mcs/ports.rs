//! The union of the constituent Services' ports.

use k8s_openapi::api::core::v1::ServicePort;

use super::aggregate::ImportPort;

/// The import's ports, and how the exports' ports differ.
#[derive(Debug)]
pub(super) struct PortMerge {
    pub ports: Vec<ImportPort>,
    /// How many exports' ports differ from the oldest's (as sets).
    pub disagreeing: usize,
    /// One sentence per port left out of the union.
    pub dropped: Vec<String>,
}

/// Merges the ports of each `(cluster, ports)`, oldest export first.
///
/// A port joins the union unless an earlier port has its name (it is then the same port when
/// protocol and number agree, else dropped), or has its protocol and number under another
/// name (dropped). An unnamed port can only be alone, as the Service API requires names when
/// there are several: a port that would join an unnamed one, or an unnamed port that would
/// join others, is dropped. The oldest export's ports therefore always stay.
pub(super) fn merge_ports(exports: &[(&str, &[ServicePort])]) -> PortMerge {
    let mut merged: Vec<(ImportPort, &str)> = Vec::new();
    let mut dropped = Vec::new();
    for (cluster, ports) in exports {
        for port in ports.iter().map(normalize) {
            match clash(&merged, &port) {
                Clash::None => merged.push((port, cluster)),
                Clash::Same => {}
                Clash::With(earlier, origin) => dropped.push(format!(
                    "Dropped {} of {cluster:?}: {origin:?} has {}{}.",
                    describe(&port),
                    describe(earlier),
                    if earlier.name.is_empty() || port.name.is_empty() {
                        ", and an unnamed port cannot be one of several"
                    } else {
                        ""
                    },
                )),
            }
        }
    }
    let sets: Vec<Vec<ImportPort>> = exports
        .iter()
        .map(|(_, ports)| {
            let mut set: Vec<ImportPort> = ports.iter().map(normalize).collect();
            set.sort_by(|a, b| a.name.cmp(&b.name).then(a.port.cmp(&b.port)));
            set
        })
        .collect();
    let disagreeing = sets
        .first()
        .map_or(0, |oldest| sets.iter().filter(|set| *set != oldest).count());
    PortMerge {
        ports: merged.into_iter().map(|(port, _)| port).collect(),
        disagreeing,
        dropped,
    }
}

enum Clash<'m> {
    None,
    /// Already in the union (the earlier export's appProtocol stays).
    Same,
    With(&'m ImportPort, &'m str),
}

fn clash<'m>(merged: &'m [(ImportPort, &'m str)], port: &ImportPort) -> Clash<'m> {
    let same_number = |p: &ImportPort| p.protocol == port.protocol && p.port == port.port;
    if let Some((earlier, origin)) = merged.iter().find(|(p, _)| p.name == port.name) {
        return if same_number(earlier) {
            Clash::Same
        } else {
            Clash::With(earlier, origin)
        };
    }
    if let Some((earlier, origin)) = merged.iter().find(|(p, _)| same_number(p)) {
        return Clash::With(earlier, origin);
    }
    match merged
        .iter()
        .find(|(p, _)| p.name.is_empty() || port.name.is_empty())
    {
        Some((earlier, origin)) => Clash::With(earlier, origin),
        None => Clash::None,
    }
}

/// The port as the import holds it: protocol defaulted to TCP, as the API server does.
fn normalize(port: &ServicePort) -> ImportPort {
    ImportPort {
        name: port.name.clone().unwrap_or_default(),
        protocol: port.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
        app_protocol: port.app_protocol.clone(),
        port: port.port,
    }
}

fn describe(port: &ImportPort) -> String {
    if port.name.is_empty() {
        format!("unnamed port ({}/{})", port.protocol, port.port)
    } else {
        format!("port {:?} ({}/{})", port.name, port.protocol, port.port)
    }
}
