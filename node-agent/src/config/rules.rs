//! The site file's rules beyond each value's form (which serde and the
//! typed values check): absolute bases, bounded waits and sizes, privileged
//! mesh ports, the metrics keys. Each message names the key and what it
//! must be. Run once, by `Config::parse`.
use std::path::Component;

use super::Config;

/// The first rule `c` breaks, as a message for the admins.
pub(super) fn check(c: &Config) -> Result<(), String> {
    mesh_ports_privileged(c)?;
    paths(c)?;
    waits(c)?;
    sizes(c)?;
    metrics(c)
}

/// The site's mesh ports are privileged: root binds them for the agents,
/// and no user can squat them. (Simulated nodes use unprivileged ones.)
fn mesh_ports_privileged(c: &Config) -> Result<(), String> {
    if c.mesh_ports.high() <= 1023 {
        return Ok(());
    }
    Err(format!(
        "mesh_ports must be privileged ports (HIGH <= 1023), which no user can squat; got \"{}\"",
        c.mesh_ports
    ))
}

fn paths(c: &Config) -> Result<(), String> {
    for (name, p) in [("temp_base", &c.temp_base), ("shm_base", &c.shm_base), ("site_key", &c.site_key)] {
        if !p.is_absolute() {
            return Err(format!("{name} must be an absolute path, got {}", p.display()));
        }
    }
    Ok(())
}

/// Every wait root makes has a lower and an upper bound.
fn waits(c: &Config) -> Result<(), String> {
    if c.startup_timeout == 0 || c.head_timeout == 0 {
        return Err("startup_timeout and head_timeout must be at least 1 second".into());
    }
    for (name, v, max) in [
        ("startup_timeout", c.startup_timeout, 3600),
        ("head_timeout", c.head_timeout, 600),
        // The epilog's whole budget is 120 s (root/budget.rs).
        ("stop_grace", c.stop_grace, 30),
    ] {
        if v > max {
            return Err(format!("{name} = {v} is over its limit of {max} seconds"));
        }
    }
    if c.stop_grace == 0 {
        return Err("stop_grace must be at least 1 second".into());
    }
    Ok(())
}

fn sizes(c: &Config) -> Result<(), String> {
    if !(4..=4096).contains(&c.runtime_dir_mb) {
        return Err(format!("runtime_dir_mb must be 4 to 4096, got {}", c.runtime_dir_mb));
    }
    if c.object_store_mb < 80 {
        return Err("object_store_mb must be at least 80 (Ray's minimum)".into());
    }
    Ok(())
}

/// `metrics_sd_dir`: empty, or an absolute path with no `..` that is
/// not `/`; the hosts: empty, or an http(s) URL with nothing odd in it.
fn metrics(c: &Config) -> Result<(), String> {
    let d = &c.metrics_sd_dir;
    let dotdot = d.components().any(|c| c == Component::ParentDir);
    if !d.as_os_str().is_empty() && (!d.is_absolute() || dotdot || d.parent().is_none()) {
        return Err(format!("metrics_sd_dir must be empty or an absolute directory other than /, got {}", d.display()));
    }
    for (name, url) in [("prometheus_host", &c.prometheus_host), ("grafana_host", &c.grafana_host)] {
        let plain = url.len() <= 512 && url.chars().all(|c| c.is_ascii_graphic());
        let scheme = ["http://", "https://"].iter().any(|s| url.strip_prefix(s).is_some_and(|r| !r.is_empty()));
        if !(url.is_empty() || plain && scheme) {
            return Err(format!("{name} must be empty or an http:// or https:// URL, got {url:?}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PortRange;

    #[test]
    fn the_defaults_break_no_rule() {
        assert_eq!(check(&Config::default()), Ok(()));
    }

    /// Each broken rule's message names the key the admins must fix.
    #[test]
    fn every_broken_rule_names_its_key() {
        let d = Config::default;
        for (c, key) in [
            (Config { mesh_ports: PortRange::new(45000, 45999).unwrap(), ..d() }, "mesh_ports must be privileged"),
            (Config { shm_base: "run/shm".into(), ..d() }, "shm_base must be an absolute path"),
            (Config { head_timeout: 0, ..d() }, "head_timeout must be at least 1"),
            (Config { startup_timeout: 3601, ..d() }, "startup_timeout = 3601 is over its limit of 3600"),
            (Config { stop_grace: 0, ..d() }, "stop_grace must be at least 1"),
            (Config { runtime_dir_mb: 2, ..d() }, "runtime_dir_mb must be 4 to 4096, got 2"),
            (Config { object_store_mb: 79, ..d() }, "object_store_mb must be at least 80"),
            (Config { metrics_sd_dir: "/".into(), ..d() }, "metrics_sd_dir must be empty or an absolute"),
            (Config { grafana_host: "grafana:3000".into(), ..d() }, "grafana_host must be empty or an http://"),
        ] {
            let e = check(&c).unwrap_err();
            assert!(e.contains(key), "{e}");
        }
    }
}
