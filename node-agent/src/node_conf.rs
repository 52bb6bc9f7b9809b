//! A node's line of `slurm.conf` (`NodeName=`): its Slurm features
//! (`Features=`), for its Ray labels, and its address (`NodeAddr=`), for a
//! node of another heterogeneous component, whose address the plugin cannot
//! send. Read by the prolog from the slurm.conf this node runs with
//! (`SLURM_CONF`; in a configless cluster, slurmd's cached copy), so it costs
//! no call to slurmctld. Follows Slurm's syntax: `#` comments, `\` line
//! continuations, `Include` files (relative to slurm.conf's directory),
//! `NodeName=DEFAULT` lines whose features hold for the lines after them,
//! node names and addresses as hostlist expressions (the n-th address is the
//! n-th name's), and `Feature=` as a synonym.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::hostlist;

/// How deep `Include`s may nest (Slurm itself allows a few levels).
const MAX_INCLUDE_DEPTH: usize = 4;

/// The features of `node` in the slurm.conf text `conf`; `read` gives an
/// included file's text by the path written after `Include`. None: no
/// `NodeName` line names the node.
pub fn node_features(conf: &str, node: &str, read: &dyn Fn(&str) -> Option<String>) -> Option<Vec<String>> {
    let found = find(conf, node, read)?;
    let features = line_features(&found.line).or(found.default_features);
    Some(split_features(features.as_deref().unwrap_or("")))
}

/// Every node's `NodeAddr` in the slurm.conf text `conf` (`read` as for
/// `node_features`), by node name, from one pass over the text and its
/// includes. A node's address is the one at its place in the address list
/// of the first line that names it; a node whose line has no address, or
/// a list that does not match its names, is not in the map.
pub fn node_addrs(conf: &str, read: &dyn Fn(&str) -> Option<String>) -> HashMap<String, String> {
    let mut first: HashMap<String, Option<String>> = HashMap::new();
    each_line(conf, read, 0, &mut |line| {
        let Some(names) = value_of(line, "NodeName").filter(|n| !n.eq_ignore_ascii_case("DEFAULT")) else {
            return false;
        };
        let Ok(names) = hostlist::expand(&names) else { return false };
        let addrs =
            value_of(line, "NodeAddr").and_then(|a| hostlist::expand(&a).ok()).filter(|a| a.len() == names.len());
        for (i, name) in names.into_iter().enumerate() {
            first.entry(name).or_insert_with(|| addrs.as_ref().map(|a| a[i].clone()));
        }
        false
    });
    first.into_iter().filter_map(|(name, addr)| Some((name, addr?))).collect()
}

/// The `NodeName` line that names a node, and the `NodeName=DEFAULT`
/// features in force there.
struct NodeLine {
    line: String,
    default_features: Option<String>,
}

fn find(conf: &str, node: &str, read: &dyn Fn(&str) -> Option<String>) -> Option<NodeLine> {
    let mut default = None;
    let mut found = None;
    each_line(conf, read, 0, &mut |line| {
        let Some(names) = value_of(line, "NodeName") else { return false };
        if names.eq_ignore_ascii_case("DEFAULT") {
            if let Some(features) = line_features(line) {
                default = Some(features);
            }
            return false;
        }
        match hostlist::expand(&names) {
            Ok(names) if names.iter().any(|n| n == node) => {
                found = Some(NodeLine { line: line.to_string(), default_features: default.clone() });
                true
            }
            _ => false,
        }
    });
    found
}

/// Each logical line of `conf` to `visit`, an `Include`d file's lines in
/// the place of its `Include` (nested at most `MAX_INCLUDE_DEPTH` deep),
/// until `visit` returns true; true if it did.
fn each_line(
    conf: &str,
    read: &dyn Fn(&str) -> Option<String>,
    depth: usize,
    visit: &mut dyn FnMut(&str) -> bool,
) -> bool {
    for line in logical_lines(conf) {
        let mut words = line.split_whitespace();
        if words.next().unwrap_or("").eq_ignore_ascii_case("include") {
            let included = words.next().filter(|_| depth < MAX_INCLUDE_DEPTH).and_then(read);
            if included.is_some_and(|text| each_line(&text, read, depth + 1, visit)) {
                return true;
            }
            continue;
        }
        if visit(&line) {
            return true;
        }
    }
    false
}

/// Lines without comments, continuations joined.
fn logical_lines(conf: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for raw in conf.lines() {
        let line = raw.split('#').next().unwrap_or("");
        match line.trim_end().strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => {
                pending.push_str(line);
                out.push(std::mem::take(&mut pending));
            }
        }
    }
    if !pending.is_empty() {
        out.push(pending);
    }
    out
}

/// The value of `Key=` (any case, quotes removed) among the line's words.
fn value_of(line: &str, key: &str) -> Option<String> {
    line.split_whitespace().find_map(|w| {
        let (k, v) = w.split_once('=')?;
        k.eq_ignore_ascii_case(key).then(|| v.trim_matches('"').to_string())
    })
}

/// A line's `Features=` (or `Feature=`) value.
fn line_features(line: &str) -> Option<String> {
    value_of(line, "Features").or_else(|| value_of(line, "Feature"))
}

fn split_features(list: &str) -> Vec<String> {
    list.split(',').map(str::trim).filter(|f| !f.is_empty()).map(str::to_string).collect()
}

/// The features of `node` from the slurm.conf at `slurm_conf`; empty when
/// it cannot be read or does not name the node.
pub fn read_node_features(slurm_conf: &Path, node: &str) -> Vec<String> {
    read_with(slurm_conf, |conf, read| node_features(conf, node, read)).unwrap_or_default()
}

/// Every node's `NodeAddr` from the slurm.conf at `slurm_conf`, by node
/// name (`node_addrs`); empty when it cannot be read.
pub fn read_node_addrs(slurm_conf: &Path) -> HashMap<String, String> {
    read_with(slurm_conf, |conf, read| Some(node_addrs(conf, read))).unwrap_or_default()
}

/// `f` over the slurm.conf at `slurm_conf`, with its includes read beside it.
fn read_with<T>(slurm_conf: &Path, f: impl Fn(&str, &dyn Fn(&str) -> Option<String>) -> Option<T>) -> Option<T> {
    let conf = std::fs::read_to_string(slurm_conf).ok()?;
    let dir = slurm_conf.parent().unwrap_or(Path::new("/")).to_path_buf();
    let read = |p: &str| -> Option<String> {
        let path = PathBuf::from(p);
        std::fs::read_to_string(if path.is_absolute() { path } else { dir.join(path) }).ok()
    };
    f(&conf, &read)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONF: &str = "\
ClusterName=x   # a comment Features=no
NodeName=DEFAULT CPUs=2 Features=standard
NodeName=node[1-2] NodeAddr=10.0.0.11,10.0.0.12 Features=cpu_fast,ib Gres=gpu:2
NodeName=node3 \\
    CPUs=4 feature=\"bigmem\"
NodeName=node4 CPUs=2
Include nodes.conf
PartitionName=debug Nodes=ALL Default=YES
";

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_nodes_features_come_from_its_line_continued_or_not_in_any_case() {
        assert_eq!(node_features(CONF, "node2", &none).unwrap(), ["cpu_fast", "ib"]);
        assert_eq!(node_features(CONF, "node3", &none).unwrap(), ["bigmem"]);
    }

    #[test]
    fn a_line_without_features_takes_the_defaults_before_it() {
        assert_eq!(node_features(CONF, "node4", &none).unwrap(), ["standard"]);
        assert_eq!(node_features("NodeName=n1 CPUs=1\n", "n1", &none).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn included_files_are_read_and_a_node_named_nowhere_has_none() {
        let read = |p: &str| (p == "nodes.conf").then(|| "NodeName=gpu[01-02] Features=a100box\n".to_string());
        assert_eq!(node_features(CONF, "gpu02", &read).unwrap(), ["a100box"]);
        assert_eq!(node_features(CONF, "other", &read), None);
        let looping = |_: &str| Some("Include self.conf\n".to_string());
        assert_eq!(node_features("Include self.conf\n", "n1", &looping), None, "nesting is bounded");
    }

    /// `node`'s address in the map of `conf`'s addresses.
    fn addr_of(conf: &str, node: &str) -> Option<String> {
        node_addrs(conf, &none).get(node).cloned()
    }

    #[test]
    fn a_nodes_address_is_the_one_at_its_place_in_its_lines_address_list() {
        assert_eq!(addr_of(CONF, "node2").as_deref(), Some("10.0.0.12"));
        let ranged = "NodeName=gpu[01-03] NodeAddr=10.1.0.[21-23]\nNodeName=cpu1 NodeAddr=cpu1-ib\n";
        assert_eq!(addr_of(ranged, "gpu03").as_deref(), Some("10.1.0.23"));
        assert_eq!(addr_of(ranged, "cpu1").as_deref(), Some("cpu1-ib"));
    }

    #[test]
    fn a_node_without_its_own_address_has_none() {
        assert_eq!(addr_of(CONF, "node3"), None, "no NodeAddr on its line");
        assert_eq!(addr_of(CONF, "other"), None, "named nowhere");
        let short = "NodeName=n[1-3] NodeAddr=10.0.0.1,10.0.0.2\n";
        assert_eq!(addr_of(short, "n2"), None, "a list that does not match the names says nothing");
        let twice = "NodeName=n1 CPUs=2\nNodeName=n1 NodeAddr=10.0.0.1\n";
        assert_eq!(addr_of(twice, "n1"), None, "the first line that names a node is its line");
    }

    #[test]
    fn one_read_of_slurm_conf_and_its_includes_maps_every_nodes_address() {
        let reads = std::cell::Cell::new(0);
        let read = |p: &str| {
            reads.set(reads.get() + 1);
            (p == "nodes.conf").then(|| "NodeName=gpu[01-02] NodeAddr=10.1.0.[1-2]\n".to_string())
        };
        let map = node_addrs(CONF, &read);
        assert_eq!(reads.get(), 1, "the include is read once for all nodes");
        let want: HashMap<String, String> =
            [("node1", "10.0.0.11"), ("node2", "10.0.0.12"), ("gpu01", "10.1.0.1"), ("gpu02", "10.1.0.2")]
                .into_iter()
                .map(|(n, a)| (n.to_string(), a.to_string()))
                .collect();
        assert_eq!(map, want, "nodes without an address (node3, node4) are not in it");
    }

    #[test]
    fn an_unreadable_slurm_conf_gives_no_features_and_no_addresses() {
        assert!(read_node_features(Path::new("/nonexistent/slurm.conf"), "n1").is_empty());
        assert!(read_node_addrs(Path::new("/nonexistent/slurm.conf")).is_empty());
        let dir = std::env::temp_dir().join(format!("syndeo-features-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("slurm.conf"), "Include nodes.conf\n").unwrap();
        std::fs::write(dir.join("nodes.conf"), "NodeName=n1 Features=x\n").unwrap();
        let got = read_node_features(&dir.join("slurm.conf"), "n1");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(got, ["x"]);
    }
}
