//! Finds syndeo's line in Slurm's SPANK plugin stack, read as slurmd reads it
//! (spank.c): `required|optional PATH [ARGS]` lines, and `include GLOB`
//! lines, a relative GLOB taken from the including file's directory. A
//! relative PATH is looked up in `PluginDir`.
use std::path::{Path, PathBuf};

use super::NodeFacts;

/// The plugin's file name, as the package's plugstack.conf.d/syndeo.conf names it.
pub const PLUGIN_FILE: &str = "syndeo.so";

/// Includes nested deeper than this are not followed (slurmd would loop too).
const MAX_DEPTH: usize = 8;

/// syndeo's line in the plugin stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginLine {
    /// The file and line number that name the plugin.
    pub file: PathBuf,
    pub line: usize,
    pub required: bool,
    /// The path as written (absolute, or relative to `PluginDir`).
    pub path: PathBuf,
}

/// What the search found: the line (if any) and every file read, in order.
#[derive(Debug, Default)]
pub struct Found {
    pub line: Option<PluginLine>,
    pub files: Vec<PathBuf>,
}

/// syndeo's line in `plugstack` and the files it includes; an error when
/// `plugstack` itself cannot be read.
pub fn find(node: &dyn NodeFacts, plugstack: &Path) -> Result<Found, String> {
    let text = node.read_text(plugstack).map_err(|e| format!("cannot read {}: {e}", plugstack.display()))?;
    let mut found = Found::default();
    search(node, plugstack, &text, 0, &mut found);
    Ok(found)
}

fn search(node: &dyn NodeFacts, file: &Path, text: &str, depth: usize, found: &mut Found) {
    found.files.push(file.to_path_buf());
    for (i, raw) in text.lines().enumerate() {
        if found.line.is_some() {
            return;
        }
        let line = raw.split('#').next().unwrap_or_default();
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("include"), Some(pattern)) if depth < MAX_DEPTH => {
                for inc in expand(node, &relative_to(file, pattern)) {
                    if let Ok(t) = node.read_text(&inc) {
                        search(node, &inc, &t, depth + 1, found);
                    }
                }
            }
            (Some(kind @ ("required" | "optional")), Some(path)) if names_plugin(path) => {
                found.line = Some(PluginLine {
                    file: file.to_path_buf(),
                    line: i + 1,
                    required: kind == "required",
                    path: PathBuf::from(path),
                });
            }
            _ => {}
        }
    }
}

fn names_plugin(path: &str) -> bool {
    Path::new(path).file_name().is_some_and(|n| n == PLUGIN_FILE)
}

/// An include's pattern, relative to the including file's directory.
fn relative_to(file: &Path, pattern: &str) -> PathBuf {
    match file.parent() {
        Some(dir) if !pattern.starts_with('/') => dir.join(pattern),
        _ => PathBuf::from(pattern),
    }
}

/// The files a pattern names, sorted (as glob(3) does); wildcards (`*`, `?`)
/// are honoured in the last component only, which is where Slurm's
/// packages put them (`plugstack.conf.d/*.conf`).
pub fn expand(node: &dyn NodeFacts, pattern: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name().and_then(|n| n.to_str())) else {
        return vec![];
    };
    if !name.contains(['*', '?']) {
        return vec![pattern.to_path_buf()];
    }
    let mut names: Vec<String> = node
        .list_dir(dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| !n.starts_with('.') && matches(name, n))
        .collect();
    names.sort();
    names.into_iter().map(|n| dir.join(n)).collect()
}

/// Shell-style matching of `*` and `?`.
fn matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// The plugin's file: the line's path if absolute, else the first
/// `PluginDir` entry that has it.
pub fn resolve(node: &dyn NodeFacts, path: &Path, plugin_dirs: &[PathBuf]) -> Option<PathBuf> {
    if path.is_absolute() {
        return node.lstat(path).is_ok().then(|| path.to_path_buf());
    }
    plugin_dirs.iter().map(|d| d.join(path)).find(|p| node.lstat(p).is_ok())
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeNode;
    use super::*;

    #[test]
    fn the_line_is_found_through_a_glob_include_of_plugstack_conf_d() {
        let node = FakeNode::healthy();
        let f = find(&node, Path::new("/etc/slurm/plugstack.conf")).unwrap();
        let line = f.line.unwrap();
        assert_eq!(line.file, PathBuf::from("/etc/slurm/plugstack.conf.d/syndeo.conf"));
        assert_eq!((line.line, line.required, line.path), (2, true, PathBuf::from("syndeo.so")));
    }

    #[test]
    fn a_relative_include_is_read_from_the_including_files_directory() {
        let mut node = FakeNode::healthy();
        node.file("/etc/slurm/plugstack.conf", "include more/x.conf\n");
        node.file("/etc/slurm/more/x.conf", "optional /opt/syndeo.so agent=/x\n");
        let line = find(&node, Path::new("/etc/slurm/plugstack.conf")).unwrap().line.unwrap();
        assert_eq!((line.required, line.path), (false, PathBuf::from("/opt/syndeo.so")));
    }

    #[test]
    fn commented_lines_and_other_plugins_do_not_count() {
        let mut node = FakeNode::healthy();
        node.file("/etc/slurm/plugstack.conf", "# required syndeo.so\nrequired other.so\n#include /x/*.conf\n");
        let f = find(&node, Path::new("/etc/slurm/plugstack.conf")).unwrap();
        assert!(f.line.is_none());
        assert_eq!(f.files.len(), 1);
    }

    #[test]
    fn an_include_that_includes_itself_stops() {
        let mut node = FakeNode::healthy();
        node.file("/etc/slurm/plugstack.conf", "include /etc/slurm/plugstack.conf\n");
        let f = find(&node, Path::new("/etc/slurm/plugstack.conf")).unwrap();
        assert!(f.line.is_none() && f.files.len() == MAX_DEPTH + 1, "{:?}", f.files);
    }

    #[test]
    fn wildcards_match_like_the_shell() {
        assert!(matches("*.conf", "syndeo.conf"));
        assert!(!matches("*.conf", "syndeo.conf.dpkg-old"));
        assert!(matches("s?ndeo*", "syndeo.conf"));
        assert!(matches("*", ""));
        assert!(!matches("a*b", "acd"));
    }

    #[test]
    fn a_relative_plugin_path_is_looked_up_in_each_plugin_dir() {
        let node = FakeNode::healthy();
        let dirs = [PathBuf::from("/nowhere"), PathBuf::from("/usr/lib/x86_64-linux-gnu/slurm-wlm")];
        let p = resolve(&node, Path::new("syndeo.so"), &dirs).unwrap();
        assert_eq!(p, PathBuf::from("/usr/lib/x86_64-linux-gnu/slurm-wlm/syndeo.so"));
        assert!(resolve(&node, Path::new("/nowhere/syndeo.so"), &dirs).is_none());
    }
}
