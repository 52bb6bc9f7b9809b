//! Keeping a job's logs past the job. At the epilog, a child that drops to
//! the job's user first thing (`syndeo-agent save-logs`, started by root)
//! copies this node's agent and Ray logs into the job's work directory,
//! `<work dir>/syndeo-<job>/<node>/`, newest first until the site's cap
//! (`logs_max_mb`): the oldest files are the ones dropped. It writes only as
//! the user, so it can do there only what the user could. Root bounds its
//! time.
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};

use super::privdrop::{drop_to, Identity};
use crate::cli::SaveLogsArgs;
use crate::job::JobSpec;

/// How long root lets the copy run.
pub const SAVE_LIMIT: Duration = Duration::from_secs(30);

/// Root's side: runs `save-logs` for `spec`'s node, bounded in time; what
/// went wrong is only reported (logs never fail an epilog).
pub fn save(spec: &JobSpec) {
    if !spec.config.keep_logs {
        return;
    }
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg("save-logs")
        .arg(format!("--uid={}", spec.uid))
        .arg(format!("--gid={}", spec.gid))
        .arg(format!("--job={}", spec.job_id))
        .arg(format!("--node={}", spec.node))
        .arg("--job-dir")
        .arg(&spec.job_dir)
        .arg("--temp-dir")
        .arg(&spec.temp_dir)
        .arg("--workdir")
        .arg(&spec.workdir)
        .arg(format!("--max-mb={}", spec.config.logs_max_mb))
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    match cmd.spawn() {
        Ok(mut child) => {
            let deadline = std::time::Instant::now() + SAVE_LIMIT;
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => return,
                    Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        return eprintln!("copying the job's logs took over {SAVE_LIMIT:?}; stopped it");
                    }
                }
            }
        }
        Err(e) => eprintln!("cannot copy the job's logs: {e}"),
    }
}

/// The child's side (`syndeo-agent save-logs`).
pub fn run(a: &SaveLogsArgs) -> Result<()> {
    drop_to(&Identity::lookup(a.uid, a.gid)?)?;
    let files = collect(&a.job_dir, &a.temp_dir);
    let dest = a.workdir.join(format!("syndeo-{}", a.job)).join(&a.node);
    let kept = newest_within(files, a.max_mb * 1024 * 1024);
    for (from, rel, _) in &kept {
        let to = dest.join(rel);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        if let Err(e) = std::fs::copy(from, &to) {
            eprintln!("cannot keep {}: {e}", from.display());
        }
    }
    Ok(())
}

/// (source, path under the destination, size): the agent's and the
/// container's logs, and every file of Ray's session logs. Links are not
/// followed; only regular files are kept.
fn collect(job_dir: &Path, temp_dir: &Path) -> Vec<(PathBuf, PathBuf, (i64, u64))> {
    let mut out = Vec::new();
    for name in ["agent.log", "ray.log"] {
        push_file(&mut out, &job_dir.join(name), PathBuf::from(name));
    }
    let ray = temp_dir.join("ray");
    let Ok(sessions) = std::fs::read_dir(&ray) else { return out };
    for s in sessions.flatten() {
        let name = s.file_name();
        if !name.to_string_lossy().starts_with("session_") || !s.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let mut stack = vec![(s.path().join("logs"), PathBuf::from("ray").join(&name).join("logs"))];
        while let Some((dir, rel)) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else { continue };
            for e in rd.flatten() {
                match e.file_type() {
                    Ok(t) if t.is_dir() => stack.push((e.path(), rel.join(e.file_name()))),
                    Ok(t) if t.is_file() => push_file(&mut out, &e.path(), rel.join(e.file_name())),
                    _ => {}
                }
            }
        }
    }
    out
}

fn push_file(out: &mut Vec<(PathBuf, PathBuf, (i64, u64))>, path: &Path, rel: PathBuf) {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if m.is_file() {
            out.push((path.to_path_buf(), rel, (m.mtime(), m.size())));
        }
    }
}

/// The newest files whose sizes add up to at most `cap` bytes.
fn newest_within(mut files: Vec<(PathBuf, PathBuf, (i64, u64))>, cap: u64) -> Vec<(PathBuf, PathBuf, (i64, u64))> {
    files.sort_by_key(|f| std::cmp::Reverse(f.2 .0));
    let mut total = 0u64;
    files.retain(|(_, _, (_, size))| {
        if total + size > cap {
            return false;
        }
        total += size;
        true
    });
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_files_are_kept_and_the_oldest_dropped_at_the_cap() {
        let f = |name: &str, mtime: i64, size: u64| (PathBuf::from(name), PathBuf::from(name), (mtime, size));
        let kept = newest_within(vec![f("old", 1, 60), f("new", 3, 50), f("mid", 2, 40)], 100);
        let names: Vec<_> = kept.iter().map(|k| k.0.to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["new", "mid"]);
    }

    #[test]
    fn ray_session_logs_and_the_agents_are_collected_without_following_links() {
        let job = tempfile::tempdir().unwrap();
        let temp = tempfile::tempdir().unwrap();
        std::fs::write(job.path().join("agent.log"), "a").unwrap();
        let logs = temp.path().join("ray/session_2026/logs/old");
        std::fs::create_dir_all(&logs).unwrap();
        std::fs::write(logs.join("raylet.out"), "r").unwrap();
        std::os::unix::fs::symlink("/etc", temp.path().join("ray/session_2026/logs/etc")).unwrap();
        std::os::unix::fs::symlink(temp.path().join("ray/session_2026"), temp.path().join("ray/session_latest"))
            .unwrap();
        let rels: Vec<PathBuf> = collect(job.path(), temp.path()).into_iter().map(|c| c.1).collect();
        assert!(rels.contains(&PathBuf::from("agent.log")));
        assert!(rels.contains(&PathBuf::from("ray/session_2026/logs/old/raylet.out")));
        assert_eq!(rels.len(), 2, "{rels:?}");
    }
}
