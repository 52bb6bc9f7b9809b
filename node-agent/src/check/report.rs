//! The report of `check`: one line per check for people
//! (`FAIL site-key: ... Fix: ...`), or one JSON array of
//! `{name, status, detail, fix}` for monitoring (`--json`).
use anyhow::Result;

use super::{Check, Status};

fn word(s: Status) -> &'static str {
    match s {
        Status::Ok => "OK",
        Status::Warn => "WARN",
        Status::Fail => "FAIL",
    }
}

/// One line per check; a WARN or FAIL ends with its fix.
pub fn text(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        let detail = c.detail.replace('\n', " ");
        out.push_str(&format!("{:<4} {}: {detail}", word(c.status), c.name));
        if let Some(fix) = &c.fix {
            out.push_str(&format!(" Fix: {}", fix.replace('\n', " ")));
        }
        out.push('\n');
    }
    out
}

/// One JSON array, on one line.
pub fn json(checks: &[Check]) -> Result<String> {
    Ok(serde_json::to_string(checks)? + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Check> {
        vec![
            Check::ok("site-key", "/etc/syndeo/site.key root's"),
            Check::fail("ray-ports", "inside\nthe range", "set ray_ports"),
        ]
    }

    #[test]
    fn each_check_is_one_line_with_its_status_name_and_for_a_failure_the_fix() {
        let t = text(&sample());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0], "OK   site-key: /etc/syndeo/site.key root's");
        assert_eq!(lines[1], "FAIL ray-ports: inside the range Fix: set ray_ports");
    }

    #[test]
    fn json_is_an_array_of_name_status_detail_fix() {
        let v: serde_json::Value = serde_json::from_str(&json(&sample()).unwrap()).unwrap();
        let a = v.as_array().unwrap();
        assert_eq!(a[0]["name"], "site-key");
        assert_eq!(a[0]["status"], "OK");
        assert!(a[0]["fix"].is_null());
        assert_eq!(a[1]["status"], "FAIL");
        assert_eq!(a[1]["fix"], "set ray_ports");
    }
}
