//! Which of a node's addresses Ray uses: the site's `network` rules (CIDRs
//! or interface names, first match wins), for nodes whose Slurm NodeAddr is
//! on a management network while a fast fabric (IPoIB, RoCE) carries the
//! data. Without rules, Ray uses NodeAddr, as the agents' mesh always does
//! (its traffic is small, and root binds its socket there before the job).
//! Rules are parsed once, when the config is loaded.
use std::net::{IpAddr, Ipv4Addr};

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

/// One entry of `network`: an IPv4 network, or an interface's name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum NetworkRule {
    Cidr(Ipv4Net),
    Interface(String),
}

impl TryFrom<String> for NetworkRule {
    type Error = String;

    fn try_from(s: String) -> Result<NetworkRule, String> {
        if s.contains('/') {
            return s.parse().map(NetworkRule::Cidr).map_err(|_| format!("network: {s:?} is not an IPv4 CIDR"));
        }
        let ok = !s.is_empty() && s.len() < 16 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-:".contains(&b));
        if ok {
            Ok(NetworkRule::Interface(s))
        } else {
            Err(format!("network: {s:?} is neither an IPv4 CIDR (\"10.1.0.0/16\") nor an interface name (\"ib0\")"))
        }
    }
}

impl From<NetworkRule> for String {
    fn from(r: NetworkRule) -> String {
        match r {
            NetworkRule::Cidr(n) => n.to_string(),
            NetworkRule::Interface(i) => i,
        }
    }
}

/// An IPv4 address of one of the node's interfaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub addr: Ipv4Addr,
}

/// Ray's address on this node: `fallback` (NodeAddr) without rules, else
/// the first rule's match among `ifaces`; none is an error naming them.
pub fn choose(rules: &[NetworkRule], ifaces: &[Iface], fallback: IpAddr) -> Result<IpAddr, String> {
    if rules.is_empty() {
        return Ok(fallback);
    }
    for rule in rules {
        let hit = ifaces.iter().find(|i| match rule {
            NetworkRule::Cidr(net) => net.contains(&i.addr),
            NetworkRule::Interface(name) => i.name == *name,
        });
        if let Some(i) = hit {
            return Ok(IpAddr::V4(i.addr));
        }
    }
    let rules: Vec<String> = rules.iter().cloned().map(String::from).collect();
    let have: Vec<String> = ifaces.iter().map(|i| format!("{} {}", i.name, i.addr)).collect();
    Err(format!(
        "no address matches network = {rules:?} in syndeo.toml; this node's addresses: {}",
        if have.is_empty() { "none".to_string() } else { have.join(", ") }
    ))
}

/// This node's IPv4 addresses but loopback's.
pub fn interfaces() -> Vec<Iface> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else { return vec![] };
    addrs
        .filter_map(|a| {
            let sin = a.address.as_ref()?.as_sockaddr_in()?.ip();
            (!sin.is_loopback()).then(|| Iface { name: a.interface_name.clone(), addr: sin })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ifaces() -> Vec<Iface> {
        vec![
            Iface { name: "eth0".into(), addr: "10.213.7.11".parse().unwrap() },
            Iface { name: "ib0".into(), addr: "10.213.8.11".parse().unwrap() },
        ]
    }

    fn rules(v: &[&str]) -> Vec<NetworkRule> {
        v.iter().map(|s| NetworkRule::try_from(s.to_string()).unwrap()).collect()
    }

    const NODE_ADDR: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 213, 7, 11));

    #[test]
    fn without_rules_ray_uses_node_addr() {
        assert_eq!(choose(&[], &ifaces(), NODE_ADDR), Ok(NODE_ADDR));
    }

    #[test]
    fn the_first_rule_that_matches_wins_whether_a_cidr_or_an_interface() {
        let ib: IpAddr = "10.213.8.11".parse().unwrap();
        assert_eq!(choose(&rules(&["10.213.8.0/24"]), &ifaces(), NODE_ADDR), Ok(ib));
        assert_eq!(choose(&rules(&["ib0"]), &ifaces(), NODE_ADDR), Ok(ib));
        assert_eq!(choose(&rules(&["192.168.0.0/16", "eth0", "ib0"]), &ifaces(), NODE_ADDR), Ok(NODE_ADDR));
    }

    #[test]
    fn a_rule_matching_nothing_names_the_rules_and_the_nodes_addresses() {
        let e = choose(&rules(&["192.168.0.0/16", "hsn0"]), &ifaces(), NODE_ADDR).unwrap_err();
        assert!(e.contains("192.168.0.0/16") && e.contains("hsn0"), "{e}");
        assert!(e.contains("eth0 10.213.7.11") && e.contains("ib0 10.213.8.11"), "{e}");
    }

    #[test]
    fn bad_rules_are_refused_at_load() {
        assert!(NetworkRule::try_from("10.1.0.0/33".to_string()).is_err());
        assert!(NetworkRule::try_from("eth0; rm -rf /".to_string()).is_err());
        assert!(NetworkRule::try_from(String::new()).is_err());
        assert_eq!(String::from(rules(&["10.1.0.0/16"])[0].clone()), "10.1.0.0/16");
    }

    #[test]
    fn this_nodes_interfaces_leave_out_loopback() {
        assert!(interfaces().iter().all(|i| !i.addr.is_loopback()));
    }
}
