//! The port ranges of syndeo.toml against the kernel's: `ray_ports` must lie
//! outside the ephemeral range (`net.ipv4.ip_local_port_range`, which the
//! kernel hands out unasked, so a connection could take a port picked for
//! Ray; the agent skips those ports), and `mesh_ports` below
//! `net.ipv4.ip_unprivileged_port_start` (above it, any user may squat them).
//! Both settings belong to the network namespace `check` runs in: the node's.
use std::path::Path;

use super::{Check, NodeFacts};
use crate::config::Config;

pub const LOCAL_PORT_RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
pub const UNPRIVILEGED_PORT_START: &str = "/proc/sys/net/ipv4/ip_unprivileged_port_start";

fn read_numbers(node: &dyn NodeFacts, path: &str) -> Result<Vec<u32>, String> {
    let text = node.read_text(Path::new(path)).map_err(|e| format!("{path}: {e}"))?;
    text.split_whitespace().map(|w| w.parse().map_err(|_| format!("{path}: {text:?} is not numbers"))).collect()
}

/// How many ports of `lo..=hi` lie inside `elo..=ehi`.
fn overlap((lo, hi): (u32, u32), (elo, ehi): (u32, u32)) -> u32 {
    let (a, b) = (lo.max(elo), hi.min(ehi));
    if a > b {
        0
    } else {
        b - a + 1
    }
}

pub fn ray_ports(node: &dyn NodeFacts, c: &Config) -> Check {
    const NAME: &str = "ray-ports";
    let (lo, hi) = c.ray_ports.bounds();
    let (elo, ehi) = match read_numbers(node, LOCAL_PORT_RANGE).as_deref() {
        Ok([a, b]) => (*a, *b),
        Ok(_) => return Check::warn(NAME, format!("{LOCAL_PORT_RANGE} is not two numbers"), "check the kernel"),
        Err(e) => return Check::warn(NAME, format!("cannot read the ephemeral range: {e}"), "check the kernel"),
    };
    let (lo, hi) = (u32::from(lo), u32::from(hi));
    let inside = overlap((lo, hi), (elo, ehi));
    let total = hi - lo + 1;
    let seen = format!("ray_ports {lo}-{hi}, ephemeral range {elo}-{ehi}");
    let fix = ray_fix(elo, ehi);
    if inside == 0 {
        Check::ok(NAME, format!("{seen}: apart"))
    } else if inside == total {
        Check::fail(NAME, format!("{seen}: every Ray port lies inside, and the agent skips them all"), fix)
    } else {
        let detail = format!("{seen}: {inside} of {total} Ray ports lie inside and are skipped");
        Check::warn(NAME, detail, fix)
    }
}

/// Where Ray's ports could go instead: below the ephemeral range when at
/// least 64 ports fit there, else above it.
fn ray_fix(elo: u32, ehi: u32) -> String {
    if elo > 1024 + 64 {
        let lo = elo.saturating_sub(12768).max(1024);
        format!("set ray_ports in syndeo.toml below {elo}, e.g. ray_ports = \"{lo}-{}\"", elo - 1)
    } else {
        format!("set ray_ports in syndeo.toml above {ehi}, or raise the start of net.ipv4.ip_local_port_range")
    }
}

pub fn mesh_ports(node: &dyn NodeFacts, c: &Config) -> Check {
    const NAME: &str = "mesh-ports";
    let (lo, hi) = c.mesh_ports.bounds();
    let start = match read_numbers(node, UNPRIVILEGED_PORT_START).as_deref() {
        Ok([s]) => *s,
        Ok(_) => return Check::warn(NAME, format!("{UNPRIVILEGED_PORT_START} is not a number"), "check the kernel"),
        Err(e) => return Check::warn(NAME, format!("cannot read it: {e}"), "check the kernel"),
    };
    let (lo, hi) = (u32::from(lo), u32::from(hi));
    let seen = format!("mesh_ports {lo}-{hi}, net.ipv4.ip_unprivileged_port_start {start}");
    let fix = format!(
        "sysctl -w net.ipv4.ip_unprivileged_port_start=1024 (and in /etc/sysctl.d/), or mesh_ports below {start}"
    );
    if hi < start {
        Check::ok(NAME, format!("{seen}: only root binds them"))
    } else if lo >= start {
        Check::fail(NAME, format!("{seen}: any user can squat every mesh port"), fix)
    } else {
        Check::warn(NAME, format!("{seen}: any user can squat mesh ports {start}-{hi}"), fix)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeNode;
    use super::super::Status;
    use super::*;

    fn ray(range: &str) -> Check {
        let range = crate::config::PortRange::parse(range).unwrap();
        ray_ports(&FakeNode::healthy(), &Config { ray_ports: range, ..Config::default() })
    }

    #[test]
    fn ray_ports_below_the_ephemeral_range_are_ok() {
        assert_eq!(ray("20000-32767").status, Status::Ok);
    }

    #[test]
    fn ray_ports_inside_the_ephemeral_range_fail_and_partly_inside_warn() {
        let c = ray("40000-40100");
        assert!(c.status == Status::Fail && c.fix.as_deref().unwrap().contains("\"20000-32767\""), "{c:?}");
        let c = ray("32000-33000");
        assert!(c.status == Status::Warn && c.detail.contains("233 of 1001"), "{c:?}");
    }

    #[test]
    fn an_unreadable_ephemeral_range_warns() {
        let mut node = FakeNode::healthy();
        node.files.remove(Path::new(LOCAL_PORT_RANGE));
        assert_eq!(ray_ports(&node, &Config::default()).status, Status::Warn);
    }

    #[test]
    fn mesh_ports_below_the_unprivileged_start_are_ok_above_it_fail_across_it_warn() {
        let mut node = FakeNode::healthy();
        assert_eq!(mesh_ports(&node, &Config::default()).status, Status::Ok);
        node.file(UNPRIVILEGED_PORT_START, "500\n");
        let c = mesh_ports(&node, &Config::default());
        assert!(
            c.status == Status::Fail && c.fix.as_deref().unwrap().contains("ip_unprivileged_port_start=1024"),
            "{}",
            c.detail
        );
        node.file(UNPRIVILEGED_PORT_START, "800\n");
        let c = mesh_ports(&node, &Config::default());
        assert!(c.status == Status::Warn && c.detail.contains("800-999"), "{c:?}");
    }

    #[test]
    fn the_fix_names_a_range_that_fits() {
        assert!(ray_fix(10000, 60999).contains("1024-9999"));
        assert!(ray_fix(1050, 60999).contains("above 60999"));
    }

    #[test]
    fn overlap_counts_shared_ports() {
        assert_eq!(overlap((1, 10), (5, 20)), 6);
        assert_eq!(overlap((1, 4), (5, 20)), 0);
        assert_eq!(overlap((6, 7), (5, 20)), 2);
    }
}
