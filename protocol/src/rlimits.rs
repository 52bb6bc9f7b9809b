//! The job's resource limits as the plugin records them at submit and the
//! root side reads them: Slurm's limit names, and the `NAME=SOFT:HARD,...`
//! record (numbers, or "unlimited"), formatted and parsed only here.

/// One limit Slurm propagates: its name in `PropagateResourceLimits` and the
/// start of its line in `/proc/self/limits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub name: &'static str,
    pub proc_label: &'static str,
}

/// Every limit Slurm propagates, in Slurm's order (others index by it).
pub const KINDS: [Kind; 10] = [
    Kind { name: "CPU", proc_label: "Max cpu time" },
    Kind { name: "FSIZE", proc_label: "Max file size" },
    Kind { name: "DATA", proc_label: "Max data size" },
    Kind { name: "STACK", proc_label: "Max stack size" },
    Kind { name: "CORE", proc_label: "Max core file size" },
    Kind { name: "RSS", proc_label: "Max resident set" },
    Kind { name: "NPROC", proc_label: "Max processes" },
    Kind { name: "NOFILE", proc_label: "Max open files" },
    Kind { name: "MEMLOCK", proc_label: "Max locked memory" },
    Kind { name: "AS", proc_label: "Max address space" },
];

/// The names of [`KINDS`], in order.
pub fn names() -> impl Iterator<Item = &'static str> {
    KINDS.iter().map(|k| k.name)
}

/// A limit's value: `u64::MAX` is "unlimited".
const UNLIMITED: &str = "unlimited";

/// One entry of the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// One of [`KINDS`]' names.
    pub name: String,
    pub soft: u64,
    pub hard: u64,
}

/// A value as the record (and `/proc/self/limits`) writes it.
pub fn format_value(v: u64) -> String {
    if v == u64::MAX {
        UNLIMITED.to_string()
    } else {
        v.to_string()
    }
}

/// A value as the record (and `/proc/self/limits`) writes it, or None.
pub fn parse_value(v: &str) -> Option<u64> {
    if v == UNLIMITED {
        Some(u64::MAX)
    } else {
        v.parse().ok()
    }
}

/// `NAME=SOFT:HARD,...`.
pub fn format_record(limits: &[Limit]) -> String {
    let item = |l: &Limit| format!("{}={}:{}", l.name, format_value(l.soft), format_value(l.hard));
    limits.iter().map(item).collect::<Vec<_>>().join(",")
}

/// The entries of a record with a known name (any case) and two values;
/// the rest is left out (the record is in the user's own environment).
pub fn parse_record(record: &str) -> Vec<Limit> {
    let entry = |item: &str| {
        let (name, v) = item.split_once('=')?;
        let (soft, hard) = v.split_once(':')?;
        let name = name.trim().to_ascii_uppercase();
        if !names().any(|n| n == name) {
            return None;
        }
        Some(Limit { name, soft: parse_value(soft)?, hard: parse_value(hard)? })
    };
    record.split(',').filter_map(entry).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(name: &str, soft: u64, hard: u64) -> Limit {
        Limit { name: name.into(), soft, hard }
    }

    #[test]
    fn a_record_round_trips_and_unlimited_is_the_largest_value() {
        let limits = vec![limit("CORE", 0, u64::MAX), limit("NOFILE", 1024, 524288)];
        let record = format_record(&limits);
        assert_eq!(record, "CORE=0:unlimited,NOFILE=1024:524288");
        assert_eq!(parse_record(&record), limits);
        assert_eq!(format_record(&[]), "");
        assert_eq!(parse_record(""), vec![]);
    }

    #[test]
    fn unknown_names_and_bad_values_are_left_out_and_names_are_any_case() {
        let got = parse_record("nofile=1:2,BOGUS=1:1,NPROC=x:1,CORE=3,AS=4:5");
        assert_eq!(got, vec![limit("NOFILE", 1, 2), limit("AS", 4, 5)]);
    }

    #[test]
    fn the_names_are_slurms_ten() {
        assert_eq!(names().collect::<Vec<_>>().join(","), "CPU,FSIZE,DATA,STACK,CORE,RSS,NPROC,NOFILE,MEMLOCK,AS");
    }
}
