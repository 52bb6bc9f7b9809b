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

/// A range of numbered names: the lower bound as written (its zero padding),
/// then the lowest and highest number.
type Numbered<'a> = (&'a str, u64, u64);

/// The shortest-form hostlist expression of `names`, in their order:
/// `["n1", "n2", "n3", "n7", "login"]` -> `n[1-3,7],login`. `expand` gives
/// the names back (zero padding included).
pub fn compress(names: &[String]) -> String {
    // Each item: a prefix and its ranges.
    let mut items: Vec<(&str, Vec<Numbered>)> = Vec::new();
    for n in names {
        let (prefix, digits) = n.split_at(n.trim_end_matches(|c: char| c.is_ascii_digit()).len());
        let Ok(v) = digits.parse::<u64>() else {
            items.push((n, Vec::new()));
            continue;
        };
        match items.last_mut() {
            Some((p, ranges)) if *p == prefix && !ranges.is_empty() => {
                let (lo, _, hi) = ranges.last_mut().expect("not empty");
                if v == *hi + 1 && format!("{v:0w$}", w = lo.len()) == digits {
                    *hi = v;
                } else {
                    ranges.push((digits, v, v));
                }
            }
            _ => items.push((prefix, vec![(digits, v, v)])),
        }
    }
    let item = |(p, ranges): &(&str, Vec<(&str, u64, u64)>)| match ranges.as_slice() {
        [] => p.to_string(),
        [(lo, a, b)] if a == b => format!("{p}{lo}"),
        _ => {
            let parts: Vec<String> =
                ranges.iter().map(|(lo, a, b)| if a == b { lo.to_string() } else { format!("{lo}-{b}") }).collect();
            format!("{p}[{}]", parts.join(","))
        }
    };
    items.iter().map(item).collect::<Vec<_>>().join(",")
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
        if !(0..=1).contains(&depth) {
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
        if lo.is_empty()
            || !lo.bytes().all(|b| b.is_ascii_digit())
            || !hi.bytes().all(|b| b.is_ascii_digit())
            || hi.is_empty()
        {
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
    fn compress_gives_back_what_expand_takes_in_the_same_order() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
        for (names, expr) in [
            (s(&["n1", "n2", "n3", "n7", "login"]), "n[1-3,7],login"),
            (s(&["node08", "node09", "node10"]), "node[08-10]"),
            (s(&["n9", "n10", "n11"]), "n[9-11]"),
            (s(&["n09", "n10", "n011"]), "n[09-10,011]"),
            (s(&["n3", "n1", "n2"]), "n[3,1-2]"),
            (s(&["rack1-n1", "rack1-n2", "rack2-n1"]), "rack1-n[1-2],rack2-n1"),
            (s(&["127.10.0.1", "127.10.0.2", "127.10.1.1"]), "127.10.0.[1-2],127.10.1.1"),
            (s(&["a", "b1"]), "a,b1"),
            (s(&[]), ""),
        ] {
            assert_eq!(compress(&names), expr);
            assert_eq!(expand(expr).unwrap(), names, "{expr}");
        }
    }

    #[test]
    fn four_thousand_contiguous_nodes_compress_to_one_range() {
        let names: Vec<String> = (1..=4096).map(|i| format!("node{i:04}")).collect();
        assert_eq!(compress(&names), "node[0001-4096]");
    }

    #[test]
    fn huge_expansions_are_refused() {
        assert!(matches!(expand("n[1-99999999]"), Err(HostlistError::BadRange { .. })));
        assert!(matches!(expand("a[1-1000]b[1-1000]"), Err(HostlistError::TooLarge(_))));
    }
}
