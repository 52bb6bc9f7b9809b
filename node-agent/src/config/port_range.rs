//! A range of TCP ports, written "LOW-HIGH" in syndeo.toml (`mesh_ports`,
//! `ray_ports`). Parsed once, when the config is loaded, by the two
//! deserializers below, whose messages name the key and what it must be;
//! later code takes the bounds as they are. Serialized back as "LOW-HIGH",
//! so the job's spec (JSON) carries the same text as before.
use std::fmt;

use serde::{de::Error as _, Deserialize, Deserializer, Serialize, Serializer};

/// Ports LOW to HIGH, both included, with 1 <= LOW <= HIGH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    low: u16,
    high: u16,
}

/// `mesh_ports`' default.
pub const DEFAULT_MESH_PORTS: PortRange = PortRange { low: 600, high: 999 };
/// `ray_ports`' default.
pub const DEFAULT_RAY_PORTS: PortRange = PortRange { low: 20000, high: 32767 };

impl PortRange {
    /// LOW to HIGH; None when LOW is 0 or above HIGH.
    pub fn new(low: u16, high: u16) -> Option<PortRange> {
        if low == 0 || high < low {
            return None;
        }
        Some(PortRange { low, high })
    }

    /// "LOW-HIGH" (spaces around either number allowed).
    pub fn parse(text: &str) -> Option<PortRange> {
        let (lo, hi) = text.split_once('-')?;
        PortRange::new(lo.trim().parse().ok()?, hi.trim().parse().ok()?)
    }

    pub fn low(self) -> u16 {
        self.low
    }

    pub fn high(self) -> u16 {
        self.high
    }

    /// (LOW, HIGH).
    pub fn bounds(self) -> (u16, u16) {
        (self.low, self.high)
    }

    /// How many ports: HIGH - LOW + 1.
    pub fn count(self) -> u32 {
        u32::from(self.high) - u32::from(self.low) + 1
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.low, self.high)
    }
}

impl Serialize for PortRange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `mesh_ports`: any "LOW-HIGH". That they are privileged is the site
/// file's rule (`Config::parse`); simulated nodes use unprivileged ones.
pub fn mesh_ports(text: &str) -> Result<PortRange, String> {
    PortRange::parse(text).ok_or_else(|| {
        format!(
            "mesh_ports must be \"LOW-HIGH\" with 1 <= LOW <= HIGH <= 1023 (privileged ports, which no user can \
             squat), got \"{text}\""
        )
    })
}

/// `ray_ports`: unprivileged, and room for a few jobs' seven ports each.
pub fn ray_ports(text: &str) -> Result<PortRange, String> {
    match PortRange::parse(text) {
        Some(r) if r.low >= 1024 && r.count() >= 64 => Ok(r),
        _ => Err(format!(
            "ray_ports must be \"LOW-HIGH\" with 1024 <= LOW and at least 64 ports, outside \
             net.ipv4.ip_local_port_range; got \"{text}\""
        )),
    }
}

/// `#[serde(deserialize_with)]` for `mesh_ports`.
pub fn deserialize_mesh_ports<'de, D: Deserializer<'de>>(d: D) -> Result<PortRange, D::Error> {
    mesh_ports(&String::deserialize(d)?).map_err(D::Error::custom)
}

/// `#[serde(deserialize_with)]` for `ray_ports`.
pub fn deserialize_ray_ports<'de, D: Deserializer<'de>>(d: D) -> Result<PortRange, D::Error> {
    ray_ports(&String::deserialize(d)?).map_err(D::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_dash_high_parses_with_or_without_spaces() {
        assert_eq!(PortRange::parse("600-999"), PortRange::new(600, 999));
        assert_eq!(PortRange::parse(" 700 - 710 ").unwrap().bounds(), (700, 710));
        assert_eq!(PortRange::parse("5-5").unwrap().count(), 1);
    }

    #[test]
    fn malformed_reversed_zero_or_overflowing_ranges_are_refused() {
        for bad in ["", "600", "600-", "-999", "a-b", "9-5", "0-10", "1-65536", "1-2-3", "600–999"] {
            assert_eq!(PortRange::parse(bad), None, "{bad:?}");
        }
        assert_eq!(PortRange::new(0, 1), None);
        assert_eq!(PortRange::new(2, 1), None);
    }

    #[test]
    fn it_prints_as_it_is_written_and_serializes_as_that_text() {
        let r = PortRange::new(20000, 32767).unwrap();
        assert_eq!(r.to_string(), "20000-32767");
        assert_eq!(serde_json::to_string(&r).unwrap(), "\"20000-32767\"");
    }

    #[test]
    fn a_bad_mesh_range_names_the_key_the_form_and_the_value() {
        let e = mesh_ports("9-5").unwrap_err();
        assert!(e.starts_with("mesh_ports must be \"LOW-HIGH\"") && e.contains("\"9-5\""), "{e}");
        assert_eq!(mesh_ports("47000-47099").unwrap().bounds(), (47000, 47099), "unprivileged is the file's rule");
    }

    #[test]
    fn ray_ports_must_be_unprivileged_and_at_least_64_ports() {
        assert_eq!(ray_ports("20000-20063").unwrap().count(), 64);
        for bad in ["80-8000", "20000-20062", "x"] {
            let e = ray_ports(bad).unwrap_err();
            assert!(e.starts_with("ray_ports must be") && e.contains(bad), "{e}");
        }
    }
}
