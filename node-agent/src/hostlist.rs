//! Expands Slurm hostlist expressions (`SLURM_JOB_NODELIST`), e.g.
//! `node[01-03,7],gpu[1-2]-ib[0-1],login` into the ordered list of node names,
//! as `scontrol show hostnames` does: ranges, zero padding, several bracket
//! groups per name and several comma-separated names.
use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum HostlistError {
    #[error("unbalanced brackets in hostlist \"{0}\"")]
    Unbalanced(String),
    #[error("bad range \"{range}\" in hostlist \"{list}\"")]
    BadRange { range: String, list: String },
    #[error("hostlist \"{0}\" expands to more than {MAX_HOSTS} names")]
    TooLarge(String),
}

/// Refuse absurd expansions (a typo like `n[1-99999999]`).
pub const MAX_HOSTS: usize = 65536;

pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let mut out = Vec::new();
    for item in split_top_level(list)? {
        if item.is_empty() {
            continue;
        }
        let mut names = vec![String::new()];
        let mut rest = item.as_str();
        while !rest.is_empty() {
            match rest.find('[') {
                None => {
                    names.iter_mut().for_each(|n| n.push_str(rest));
                    rest = "";
                }
                Some(open) => {
                    let close = rest[open..]
                        .find(']')
                        .map(|c| c + open)
                        .ok_or_else(|| HostlistError::Unbalanced(list.into()))?;
                    let prefix = &rest[..open];
                    let values = expand_ranges(&rest[open + 1..close], list)?;
                    let mut next = Vec::with_capacity(names.len() * values.len());
                    for n in &names {
                        for v in &values {
                            next.push(format!("{n}{prefix}{v}"));
                        }
                    }
                    if next.len() > MAX_HOSTS {
                        return Err(HostlistError::TooLarge(list.into()));
                    }
                    names = next;
                    rest = &rest[close + 1..];
                }
            }
        }
        out.extend(names);
        if out.len() > MAX_HOSTS {
            return Err(HostlistError::TooLarge(list.into()));
        }
    }
    Ok(out)
}

/// Splits on commas that are not inside brackets.
fn split_top_level(list: &str) -> Result<Vec<String>, HostlistError> {
    let (mut items, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in list.trim().chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ => {}
        }
        if depth < 0 || depth > 1 {
            return Err(HostlistError::Unbalanced(list.into()));
        }
        if c == ',' && depth == 0 {
            items.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    if depth != 0 {
        return Err(HostlistError::Unbalanced(list.into()));
    }
    items.push(cur);
    Ok(items)
}

/// `01-03,7` -> ["01", "02", "03", "7"]; the lower bound's width sets the padding.
fn expand_ranges(spec: &str, list: &str) -> Result<Vec<String>, HostlistError> {
    let bad = |r: &str| HostlistError::BadRange { range: r.into(), list: list.into() };
    let mut out = Vec::new();
    for part in spec.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if lo.is_empty() || !lo.bytes().all(|b| b.is_ascii_digit()) || !hi.bytes().all(|b| b.is_ascii_digit()) || hi.is_empty() {
            return Err(bad(part));
        }
        let width = lo.len();
        let (a, b): (u64, u64) = (lo.parse().map_err(|_| bad(part))?, hi.parse().map_err(|_| bad(part))?);
        if b < a || (b - a) as usize >= MAX_HOSTS {
            return Err(bad(part));
        }
        out.extend((a..=b).map(|v| format!("{v:0width$}")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(s: &str) -> Vec<String> {
        expand(s).unwrap()
    }

    #[test]
    fn single_name_is_itself() {
        assert_eq!(ex("login1"), vec!["login1"]);
    }

    #[test]
    fn range_and_list_inside_brackets() {
        assert_eq!(ex("n[1-3,7]"), vec!["n1", "n2", "n3", "n7"]);
    }

    #[test]
    fn zero_padding_follows_the_lower_bound() {
        assert_eq!(ex("node[08-11]"), vec!["node08", "node09", "node10", "node11"]);
        assert_eq!(ex("n[001-002]"), vec!["n001", "n002"]);
    }

    #[test]
    fn several_prefixes_keep_their_order() {
        assert_eq!(ex("b[2-3],a1,c[1]"), vec!["b2", "b3", "a1", "c1"]);
    }

    #[test]
    fn several_bracket_groups_multiply_with_suffixes() {
        assert_eq!(ex("rack[1-2]-n[1-2]-ib"), vec!["rack1-n1-ib", "rack1-n2-ib", "rack2-n1-ib", "rack2-n2-ib"]);
    }

    #[test]
    fn malformed_lists_are_errors() {
        assert!(matches!(expand("n[1-3"), Err(HostlistError::Unbalanced(_))));
        assert!(matches!(expand("n1-3]"), Err(HostlistError::Unbalanced(_))));
        assert!(matches!(expand("n[3-1]"), Err(HostlistError::BadRange { .. })));
        assert!(matches!(expand("n[a-b]"), Err(HostlistError::BadRange { .. })));
        assert!(matches!(expand("n[[1]]"), Err(HostlistError::Unbalanced(_))));
    }

    #[test]
    fn huge_expansions_are_refused() {
        assert!(matches!(expand("n[1-99999999]"), Err(HostlistError::BadRange { .. })));
        assert!(matches!(expand("a[1-1000]b[1-1000]"), Err(HostlistError::TooLarge(_))));
    }
}
