//! The Ray versions syndeo runs, and what each gets: the one place where Ray
//! versions are told apart. The launcher in the container reports the
//! image's Ray and Python versions and the options its `ray start` accepts
//! (it has loaded Ray anyway, so this costs nothing and needs no cache);
//! before the first `ray start` of each container the agent checks them here
//! and fits its arguments to them.
//!
//! Tiers:
//! - Ray 2.52 and later: token authentication; syndeo's default.
//! - Ray 2.7.1 to 2.51: no token authentication: anyone who can reach the
//!   nodes can join the cluster and run code as the job's user. Refused,
//!   unless the site sets `allow_unauthenticated_ray = true`; then the job's
//!   stderr says so once.
//! - Before 2.7.1: refused always; Ray's runtime-env agent port cannot be
//!   chosen, so two jobs on one node collide.
//!
//! Node labels (Slurm's facts, `syndeo_protocol::labels`): from Ray 2.49,
//! the first with label selectors and `--labels k=v,...`. Before it, `ray
//! start` has a hidden `--labels` that takes JSON and no task or actor can
//! select on it: syndeo passes no labels, and the job's stderr says so once.
//!
//! The raylet's own command line (`raylet_args`): from Ray 2.54 the raylet,
//! before it registers, waits for the dashboard agent to write its listen
//! port to a file in the session dir, a fixed 15 s, and aborts past it;
//! Ray's `ray start` does not hand it the port even when it is chosen, as
//! syndeo chooses it. Under load, or from a compressed SIF, the agent's
//! Python start can take longer (`ray start` then fails "timed out during
//! startup"), and while it lasts the node is not in the cluster. The same
//! Ray's raylet takes `--dashboard_agent_listen_port`: given it, the raylet
//! neither waits nor aborts. Before 2.54 there is neither wait nor option.
//! Given only where the port is held for the agent (the preload library).
use std::collections::BTreeSet;
use std::fmt;

use serde::Deserialize;

use crate::fault::Fault;

/// The first Ray with token authentication.
pub const TOKEN_AUTH: Version = Version(2, 52, 0);
/// The first Ray whose every port can be chosen (`--runtime-env-agent-port`).
pub const PINNED_PORTS: Version = Version(2, 7, 1);

/// The first Ray with label selectors, whose `ray start --labels` takes `k=v,...`.
pub const NODE_LABELS: Version = Version(2, 49, 0);

/// The first Ray whose raylet waits for the dashboard agent's listen port
/// and takes it as `--dashboard_agent_listen_port` (module comment).
pub const RAYLET_TAKES_AGENT_PORT: Version = Version(2, 54, 0);

/// A release number, major.minor.patch (suffixes such as `.dev0` or `rc1` ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    pub fn parse(s: &str) -> Option<Version> {
        let mut parts = s.trim().split('.').map(|p| {
            let digits: String = p.chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse::<u32>().ok()
        });
        let major = parts.next()??;
        let minor = parts.next()??;
        let patch = parts.next().flatten().unwrap_or(0);
        Some(Version(major, minor, patch))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// What the launcher reported of the image's Ray.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ImageRay {
    /// `ray.__version__`.
    pub ray: String,
    /// `platform.python_version()`.
    pub python: String,
    /// Every long option of the image's `ray start`; None: not known, pass
    /// every argument (the stand-in launcher of tests and benchmarks).
    pub flags: Option<BTreeSet<String>>,
    /// Whether syndeo's preload library loaded in the launcher (`ports.rs`);
    /// None: the agent named none (its install lacks it: logged), or the
    /// stand-in launcher.
    #[serde(default)]
    pub preload: Option<bool>,
    /// Whether the image's Ray has its dashboard (`ray[default]`); None: not said.
    #[serde(default)]
    pub dashboard: Option<bool>,
}

impl ImageRay {
    /// What the stand-in launcher reports: the newest tier, every flag.
    #[cfg(any(test, feature = "simulation"))]
    pub fn stand_in() -> ImageRay {
        ImageRay { ray: "2.60.0".into(), python: "3.11.2".into(), flags: None, preload: None, dashboard: None }
    }

    /// A ready line whose report could not be read: refused by `check`.
    pub fn unreadable() -> ImageRay {
        ImageRay { ray: "unknown".into(), python: "unknown".into(), flags: None, preload: None, dashboard: None }
    }

    /// Python's major.minor, which a driver must share with the cluster.
    pub fn python_minor(&self) -> String {
        self.python.split('.').take(2).collect::<Vec<_>>().join(".")
    }
}

/// What the site allows, from syndeo.toml.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub allow_unauthenticated: bool,
}

/// Whether this image's Ray may run, and the one warning the job must get
/// if it runs without authentication. `image` names it in messages.
pub fn check(found: &ImageRay, policy: Policy, image: &str) -> Result<Option<String>, Fault> {
    let what = format!("image {image} has Ray {} (Python {})", found.ray, found.python);
    let Some(v) = Version::parse(&found.ray) else {
        return Err(Fault::user(format!(
            "{what}: syndeo cannot read that version; use an image with Ray {TOKEN_AUTH} or later"
        )));
    };
    if v < PINNED_PORTS {
        return Err(Fault::user(format!(
            "{what}, which syndeo cannot run: before Ray {PINNED_PORTS} not every port of Ray can be chosen, so two \
             jobs on one node would collide; use an image with Ray {TOKEN_AUTH} or later"
        )));
    }
    if v >= TOKEN_AUTH {
        return Ok(None);
    }
    if !policy.allow_unauthenticated {
        return Err(Fault::user(format!(
            "{what}; syndeo needs Ray {TOKEN_AUTH} or later, the first with token authentication (without it anyone \
             who can reach the job's nodes can join its cluster and run code as you). Use an image with Ray \
             {TOKEN_AUTH} or later, or ask the site's admins to allow older Ray (allow_unauthenticated_ray = true in \
             syndeo.toml)"
        )));
    }
    Ok(Some(format!(
        "syndeo: WARNING: {what}, which has no token authentication: anyone who can reach the job's nodes can join \
         its Ray cluster and run code as you (the site allows this: allow_unauthenticated_ray = true)"
    )))
}

/// Options that only add to what the image's Ray does: dropped when it does
/// not know them. Every other option syndeo passes keeps jobs apart (ports,
/// directories, resources): without one the image cannot run.
const OPTIONAL: &[&str] =
    &["--disable-usage-stats", "--include-dashboard", "--dashboard-host", "--ray-client-server-port", "--labels"];
/// Options syndeo passes that take no value.
const SWITCHES: &[&str] = &["--head", "--disable-usage-stats", "--block"];

/// Whether the image's Ray takes syndeo's node labels.
pub fn has_node_labels(found: &ImageRay) -> bool {
    Version::parse(&found.ray).is_some_and(|v| v >= NODE_LABELS)
}

/// The one line for the job's stderr when the image's Ray gets no labels.
pub fn labels_note(found: &ImageRay, image: &str) -> Option<String> {
    (!has_node_labels(found)).then(|| {
        format!(
            "syndeo: image {image} has Ray {}, which has no label selectors (Ray {NODE_LABELS} and later): its \
             nodes carry no Slurm labels (slurm/node, slurm/partition, ...)",
            found.ray
        )
    })
}

/// What the image's raylet gets on its own command line, beside what Ray's
/// `ray start` gives it: the dashboard agent's listen port, from
/// [`RAYLET_TAKES_AGENT_PORT`] on; nothing before. Only when the port is
/// held for the agent (syndeo's preload library loaded): a port left free
/// between its pick and the agent's bind may be another user's by then, and
/// the raylet would publish it to the cluster as its agent's.
pub fn raylet_args(found: &ImageRay, dashboard_agent_port: u16) -> Vec<String> {
    match Version::parse(&found.ray) {
        Some(v) if v >= RAYLET_TAKES_AGENT_PORT && found.preload == Some(true) => {
            vec![format!("--dashboard_agent_listen_port={dashboard_agent_port}")]
        }
        _ => vec![],
    }
}

/// `args` fitted to the image's `ray start`: unknown optional options are
/// dropped with their values; an unknown necessary one refuses the image.
/// `--labels` goes for a Ray before [`NODE_LABELS`] (another format there).
pub fn fit_args(args: &[String], found: &ImageRay, image: &str) -> Result<Vec<String>, Fault> {
    let args = &without_labels_unless(has_node_labels(found), args);
    let Some(known) = &found.flags else { return Ok(args.to_vec()) };
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let flag = &args[i];
        let takes_value = flag.starts_with("--") && !SWITCHES.contains(&flag.as_str());
        let end = if takes_value { (i + 2).min(args.len()) } else { i + 1 };
        if !flag.starts_with("--") || known.contains(flag) {
            out.extend_from_slice(&args[i..end]);
        } else if !OPTIONAL.contains(&flag.as_str()) {
            return Err(Fault::user(format!(
                "image {image} has Ray {}, whose `ray start` has no {flag} option, which syndeo needs to keep jobs \
                 on a node apart; use an image with Ray {TOKEN_AUTH} or later",
                found.ray
            )));
        }
        i = end;
    }
    Ok(out)
}

/// `args`, less `--labels` and its value unless `keep`.
fn without_labels_unless(keep: bool, args: &[String]) -> Vec<String> {
    match args.iter().position(|a| a == "--labels") {
        Some(i) if !keep => args[..i].iter().chain(args.get(i + 2..).unwrap_or_default()).cloned().collect(),
        _ => args.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ray(v: &str) -> ImageRay {
        ImageRay { ray: v.into(), python: "3.11.2".into(), flags: None, preload: None, dashboard: None }
    }
    const ALLOW: Policy = Policy { allow_unauthenticated: true };
    const DENY: Policy = Policy { allow_unauthenticated: false };

    #[test]
    fn versions_parse_with_suffixes_and_order_numerically() {
        assert_eq!(Version::parse("2.60.0"), Some(Version(2, 60, 0)));
        assert_eq!(Version::parse("3.0.0.dev0"), Some(Version(3, 0, 0)));
        assert_eq!(Version::parse("2.52.0rc1"), Some(Version(2, 52, 0)));
        assert_eq!(Version::parse("2.9"), Some(Version(2, 9, 0)));
        assert_eq!(Version::parse("nightly"), None);
        assert!(Version(2, 9, 3) < Version(2, 40, 0) && Version(2, 40, 0) < TOKEN_AUTH);
    }

    #[test]
    fn ray_with_token_auth_runs_without_a_warning() {
        assert_eq!(check(&ray("2.52.1"), DENY, "/img").unwrap(), None);
        assert_eq!(check(&ray("2.60.0"), DENY, "/img").unwrap(), None);
        assert_eq!(check(&ray("3.0.0.dev0"), DENY, "/img").unwrap(), None);
    }

    #[test]
    fn ray_without_token_auth_is_refused_naming_versions_and_the_setting_unless_allowed_then_warned() {
        let e = check(&ray("2.40.0"), DENY, "/img/old.sif").unwrap_err();
        assert!(!e.is_node());
        let m = e.to_string();
        for part in ["/img/old.sif", "Ray 2.40.0", "Python 3.11.2", "2.52.0", "allow_unauthenticated_ray = true"] {
            assert!(m.contains(part), "{part}: {m}");
        }
        let warning = check(&ray("2.40.0"), ALLOW, "/img").unwrap().unwrap();
        assert!(warning.contains("anyone who can reach the job's nodes can join"), "{warning}");
    }

    #[test]
    fn ray_before_2_7_1_is_refused_even_when_the_site_allows_old_ray() {
        let m = check(&ray("2.7.0"), ALLOW, "/img").unwrap_err().to_string();
        assert!(m.contains("2.7.1") && m.contains("collide"), "{m}");
        assert!(check(&ray("2.7.1"), ALLOW, "/img").is_ok());
        assert!(check(&ray("garbage"), ALLOW, "/img").is_err());
    }

    #[test]
    fn labels_reach_ray_2_49_and_later_only_and_older_ray_gets_a_note() {
        let args: Vec<String> = ["--labels", "slurm/node=n1", "--temp-dir", "/t"].map(String::from).to_vec();
        for v in ["2.49.0", "2.52.1", "2.60.0"] {
            assert_eq!(fit_args(&args, &ray(v), "/img").unwrap(), args, "{v}");
            assert_eq!(labels_note(&ray(v), "/img"), None, "{v}");
        }
        for v in ["2.9.3", "2.40.0", "2.48.9"] {
            assert_eq!(fit_args(&args, &ray(v), "/img").unwrap(), ["--temp-dir", "/t"], "{v}");
            let note = labels_note(&ray(v), "/img/old").unwrap();
            assert!(note.contains("/img/old") && note.contains(v) && note.contains("2.49.0"), "{note}");
        }
        let mut without_flag = ray("2.60.0");
        without_flag.flags = Some(["--temp-dir"].map(String::from).into_iter().collect());
        assert_eq!(fit_args(&args, &without_flag, "/img").unwrap(), ["--temp-dir", "/t"]);
    }

    #[test]
    fn the_raylet_is_told_the_agents_held_port_from_ray_2_54_on_and_older_raylets_or_unheld_ports_get_nothing() {
        let held = |v: &str| ImageRay { preload: Some(true), ..ray(v) };
        assert_eq!(raylet_args(&held("2.60.0"), 41234), ["--dashboard_agent_listen_port=41234"]);
        assert_eq!(raylet_args(&held("2.54.0rc1"), 7), ["--dashboard_agent_listen_port=7"]);
        for old in ["2.53.0", "2.52.1", "2.9.3", "unknown"] {
            assert!(raylet_args(&held(old), 41234).is_empty(), "{old}");
        }
        for preload in [Some(false), None] {
            let unheld = ImageRay { preload, ..ray("2.60.0") };
            assert!(raylet_args(&unheld, 41234).is_empty(), "{preload:?}");
        }
    }

    #[test]
    fn unknown_optional_flags_go_with_their_values_and_unknown_necessary_ones_refuse() {
        let args: Vec<String> = [
            "--head",
            "--port",
            "6379",
            "--ray-client-server-port",
            "10001",
            "--disable-usage-stats",
            "--temp-dir",
            "/t",
        ]
        .map(String::from)
        .to_vec();
        let mut found = ray("2.60.0");
        found.flags = Some(["--head", "--port", "--temp-dir"].map(String::from).into_iter().collect());
        assert_eq!(fit_args(&args, &found, "/img").unwrap(), ["--head", "--port", "6379", "--temp-dir", "/t"]);
        found.flags = Some(["--head", "--port"].map(String::from).into_iter().collect());
        let m = fit_args(&args, &found, "/img").unwrap_err().to_string();
        assert!(m.contains("--temp-dir"), "{m}");
        found.flags = None;
        assert_eq!(fit_args(&args, &found, "/img").unwrap(), args);
    }
}
