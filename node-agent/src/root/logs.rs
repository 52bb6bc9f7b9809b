//! Keeping a job's logs past the job. At the epilog, a child that drops to
//! the job's user first thing (`syndeo-agent save-logs`, started by root)
//! copies this node's agent and Ray logs into the job's work directory,
//! `<work dir>/syndeo-<job>/<node>/`, newest first until the site's cap
//! (`logs_max_mb`): the oldest files are the ones dropped. It writes only as
//! the user, so it can do there only what the user could.
//!
//! It reads the job's trees the way root's clean-up does (`beneath.rs`):
//! relative to the opened job and temp directories, never through a link in
//! any component, never into another filesystem (a mount the user made in
//! their tree), and only regular files, up to the size they had when
//! listed. Root gives it until the epilog's log deadline, then SIGKILLs it;
//! a child that still does not end (stuck in the kernel, in a hung FUSE
//! mount of the user's) is named in slurmd's log and left behind.
use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::dir::{Dir, Type};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstatat, SFlag};

use super::beneath::open_beneath;
use super::dirs::open_dir_nofollow;
use super::privdrop::{drop_to, Identity};
use super::procs;
use crate::cli::SaveLogsArgs;
use crate::job::JobSpec;

/// Between SIGKILL and giving up on the copy's process.
const REAP: Duration = Duration::from_secs(2);
/// Entries the copy looks at, at most (a job's tree may hold millions).
const MAX_ENTRIES: usize = 100_000;

/// Root's side: runs `save-logs` for `spec`'s node until `deadline`; what
/// went wrong is only reported (logs never fail an epilog).
pub fn save(spec: &JobSpec, deadline: Instant) {
    if !spec.config.keep_logs {
        return;
    }
    if Instant::now() + REAP >= deadline {
        return eprintln!("no time left in the epilog to copy the job's logs; not copied");
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
        Ok(child) => bound(child, deadline),
        Err(e) => eprintln!("cannot copy the job's logs: {e}"),
    }
}

/// Lets `child` run until shortly before `deadline`, then SIGKILLs it (it
/// is root's own child, not yet reaped: its PID cannot have been reused)
/// and waits for it until `deadline` at most.
fn bound(mut child: Child, deadline: Instant) {
    let kill_at = deadline.checked_sub(REAP).unwrap_or(deadline);
    if wait_until(&mut child, kill_at) {
        return;
    }
    let _ = child.kill();
    if wait_until(&mut child, deadline) {
        return eprintln!("copying the job's logs did not finish in time; stopped it (some logs were not kept)");
    }
    eprintln!(
        "copying the job's logs: its process, {}, did not end after SIGKILL (stuck in the kernel, perhaps in a \
         hung FUSE mount of the user's); not waiting for it",
        procs::describe(child.id() as i32)
    );
}

/// Whether `child` ended (and was reaped) by `until`.
fn wait_until(child: &mut Child, until: Instant) -> bool {
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => return false,
            Err(_) => return true, // not ours to wait for any more
        }
    }
}

/// The child's side (`syndeo-agent save-logs`).
pub fn run(a: &SaveLogsArgs) -> Result<()> {
    drop_to(&Identity::lookup(a.uid, a.gid)?)?;
    let dest = a.workdir.join(format!("syndeo-{}", a.job)).join(&a.node);
    keep(&a.job_dir, &a.temp_dir, &dest, a.max_mb * 1024 * 1024);
    Ok(())
}

/// A tree the copy reads: its directory, opened without following a link,
/// and the device it lies on.
struct Source {
    dir: File,
    dev: u64,
}

impl Source {
    fn open(path: &Path) -> Option<Source> {
        let dir = open_dir_nofollow(path).ok()?;
        let dev = nix::sys::stat::fstat(dir.as_raw_fd()).ok()?.st_dev;
        Some(Source { dir, dev })
    }
}

/// A file found: its source (0 the job dir, 1 the temp dir), its path
/// under it (and under the destination), its mtime and size.
type Found = (usize, PathBuf, (i64, u64));

/// Copies the newest of the job's logs within `cap` bytes into `dest`.
fn keep(job_dir: &Path, temp_dir: &Path, dest: &Path, cap: u64) {
    let sources = [Source::open(job_dir), Source::open(temp_dir)];
    for (source, rel, (_, size)) in newest_within(collect(&sources), cap) {
        let Some(src) = &sources[source] else { continue };
        if let Err(e) = copy_one(src, &rel, size, &dest.join(&rel)) {
            eprintln!("cannot keep {}: {e:#}", rel.display());
        }
    }
}

/// The agent's and the container's logs, and every file of Ray's session
/// logs: regular files on their tree's filesystem, reached without a link.
fn collect(sources: &[Option<Source>; 2]) -> Vec<Found> {
    let mut out = Vec::new();
    if let Some(job) = &sources[0] {
        for name in ["agent.log", "ray.log"] {
            push_file(&mut out, job, 0, Path::new(""), name.as_ref(), job.dir.as_raw_fd());
        }
    }
    let Some(temp) = &sources[1] else { return out };
    let mut seen = 0usize;
    let mut stack = Vec::new();
    for (name, kind) in entries(temp, Path::new("ray"), &mut seen) {
        if name.as_bytes().starts_with(b"session_") && kind == Some(Type::Directory) {
            stack.push(Path::new("ray").join(name).join("logs"));
        }
    }
    while let Some(rel) = stack.pop() {
        let Ok(dir) = open_beneath(temp.dir.as_raw_fd(), &rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY) else {
            continue;
        };
        for (name, kind) in entries(temp, &rel, &mut seen) {
            match kind {
                Some(Type::Directory) => stack.push(rel.join(&name)),
                Some(Type::File) | None => push_file(&mut out, temp, 1, &rel, &name, dir.raw()),
                _ => {}
            }
        }
    }
    out
}

/// The entries of `rel` under `src` and their types (None: unknown), while
/// fewer than `MAX_ENTRIES` were seen in all.
fn entries(src: &Source, rel: &Path, seen: &mut usize) -> Vec<(OsString, Option<Type>)> {
    let Ok(fd) = open_beneath(src.dir.as_raw_fd(), rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY) else {
        return vec![];
    };
    let Ok(mut dir) = Dir::from_fd(fd.into_raw()) else { return vec![] };
    let mut out = Vec::new();
    for e in dir.iter().flatten() {
        let name = std::ffi::OsStr::from_bytes(e.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        *seen += 1;
        if *seen > MAX_ENTRIES {
            eprintln!("the job's log directories hold over {MAX_ENTRIES} entries; kept those seen first");
            break;
        }
        out.push((name.to_os_string(), e.file_type()));
    }
    out
}

/// Adds `rel/name` (an entry of the opened `dir`) if it is a regular file
/// on `src`'s filesystem (not following a link).
fn push_file(out: &mut Vec<Found>, src: &Source, source: usize, rel: &Path, name: &std::ffi::OsStr, dir: RawFd) {
    let Ok(st) = fstatat(Some(dir), name, AtFlags::AT_SYMLINK_NOFOLLOW) else { return };
    let regular = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG;
    if regular && st.st_dev == src.dev {
        out.push((source, rel.join(name), (st.st_mtime, st.st_size as u64)));
    }
}

/// Copies at most `size` bytes of `rel` under `src` (opened beneath it, and
/// checked again: a regular file on its filesystem) to `to`, as the user.
fn copy_one(src: &Source, rel: &Path, size: u64, to: &Path) -> Result<()> {
    let fd = open_beneath(src.dir.as_raw_fd(), rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK)?;
    let st = fd.stat()?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG || st.st_dev != src.dev {
        bail!("not a regular file of the job's any more");
    }
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    let mut out = File::create(to).with_context(|| format!("creating {}", to.display()))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut left = size;
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = nix::unistd::read(fd.raw(), &mut buf[..want])?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// The newest files whose sizes add up to at most `cap` bytes.
fn newest_within(mut files: Vec<Found>, cap: u64) -> Vec<Found> {
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
mod tests;
