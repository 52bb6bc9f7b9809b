//! Unit tests of the log copy: what is kept, and what is never followed,
//! read or waited for.
use super::*;
use nix::sys::stat::Mode;

fn found(name: &str, mtime: i64, size: u64) -> Found {
    (0, PathBuf::from(name), (mtime, size))
}

#[test]
fn the_newest_files_are_kept_and_the_oldest_dropped_at_the_cap() {
    let kept = newest_within(vec![found("old", 1, 60), found("new", 3, 50), found("mid", 2, 40)], 100);
    let names: Vec<_> = kept.iter().map(|k| k.1.to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["new", "mid"]);
}

/// Files under the destination, relative to it.
fn kept_files(dest: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dest.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dest).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn ray_session_logs_and_the_agents_are_kept_and_no_link_or_fifo_is_followed_or_read() {
    let (job, temp, dest) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(job.path().join("agent.log"), "a").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", job.path().join("ray.log")).unwrap();
    let logs = temp.path().join("ray/session_2026/logs");
    std::fs::create_dir_all(logs.join("old")).unwrap();
    std::fs::write(logs.join("old/raylet.out"), "r").unwrap();
    std::os::unix::fs::symlink("/etc", logs.join("etc")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", logs.join("passwd.out")).unwrap();
    nix::unistd::mkfifo(&logs.join("fifo.out"), Mode::S_IRWXU).unwrap();
    std::os::unix::fs::symlink(temp.path().join("ray/session_2026"), temp.path().join("ray/session_latest")).unwrap();
    keep(job.path(), temp.path(), dest.path(), 1 << 20);
    assert_eq!(kept_files(dest.path()), ["agent.log", "ray/session_2026/logs/old/raylet.out"]);
    assert_eq!(std::fs::read_to_string(dest.path().join("ray/session_2026/logs/old/raylet.out")).unwrap(), "r");
}

#[test]
fn a_link_in_place_of_the_ray_or_logs_directory_is_not_followed() {
    let (job, temp, dest) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(elsewhere.path().join("session_1/logs")).unwrap();
    std::fs::write(elsewhere.path().join("session_1/logs/secret.out"), "s").unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), temp.path().join("ray")).unwrap();
    keep(job.path(), temp.path(), dest.path(), 1 << 20);
    std::fs::remove_file(temp.path().join("ray")).unwrap();
    std::fs::create_dir_all(temp.path().join("ray/session_2")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path().join("session_1/logs"), temp.path().join("ray/session_2/logs"))
        .unwrap();
    keep(job.path(), temp.path(), dest.path(), 1 << 20);
    assert!(kept_files(dest.path()).is_empty(), "{:?}", kept_files(dest.path()));
}

/// A mount the user made inside their logs (a FUSE mount could hang the
/// copy) is not entered: nothing of it is copied.
#[test]
fn a_mount_inside_the_logs_is_not_entered() {
    if !nix::unistd::geteuid().is_root() {
        return; // mounting is root's
    }
    let (job, temp, dest) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let m = temp.path().join("ray/session_1/logs/m");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(temp.path().join("ray/session_1/logs/raylet.out"), "r").unwrap();
    nix::mount::mount(Some("t"), &m, Some("tmpfs"), nix::mount::MsFlags::empty(), None::<&str>).unwrap();
    std::fs::write(m.join("inside.out"), "x").unwrap();
    keep(job.path(), temp.path(), dest.path(), 1 << 20);
    nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH).unwrap();
    assert_eq!(kept_files(dest.path()), ["ray/session_1/logs/raylet.out"]);
}

#[test]
fn a_copy_that_runs_past_its_deadline_is_killed_and_root_waits_no_longer() {
    let child = Command::new("/bin/sleep").arg("30").spawn().unwrap();
    let pid = child.id() as i32;
    let t = Instant::now();
    bound(child, Instant::now() + Duration::from_secs(3));
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    assert!(procs::stat(pid).is_none(), "the copy's process is still there");
}
