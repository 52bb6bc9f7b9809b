//! Packaging: `packaging/build` makes a deb and an RPM for the Slurm release
//! whose headers it is given (the running minicluster's), and the deb,
//! installed on the minicluster (in its release's root) in place of the dev
//! install, runs the end-to-end job; a newer deb installed while a syndeo job
//! runs breaks none of it.
use std::time::Duration;

use syndeo_tests::*;

const DRIVER: &str = r#"
import socket, ray
ray.init()
alive = [n for n in ray.nodes() if n["Alive"]]
hosts = ray.get([ray.remote(lambda: socket.gethostname()).options(
    scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
    for n in alive])
print("PACKAGED_HOSTS", ",".join(sorted(hosts)))
"#;

/// A command as root inside the running release's root (dpkg, dpkg-query).
fn in_release(argv: &[&str]) -> std::process::Output {
    std::process::Command::new(minicluster())
        .args(["exec", "--"])
        .args(argv)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// The deb installed in place of the dev install; dropped (even by a failing
/// assertion), it purges the package and puts the dev install back.
struct Installed;

impl Installed {
    fn deb(deb: &str) -> Installed {
        in_release(&["dpkg", "--purge", "syndeo"]); // a run that died earlier may have left it
        dpkg_install(deb, "--force-confnew");
        Installed
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let purged = in_release(&["dpkg", "--purge", "syndeo"]);
        let up = minicluster_up_again();
        if !std::thread::panicking() {
            assert!(purged.status.success(), "dpkg --purge: {}", text(&purged));
            assert!(up.status.success(), "{}", text(&up));
        }
    }
}

fn dpkg_install(deb: &str, conf: &str) {
    let o = in_release(&["dpkg", "-i", conf, deb]);
    assert!(o.status.success(), "dpkg -i {deb}: {}", text(&o));
}

/// The installed package's configuration, with the runtime the minicluster
/// has for this release (the package's default is Apptainer).
fn use_the_minicluster_runtime(runtime: &str) {
    let path = format!("{}/etc/syndeo/syndeo.toml", root_prefix());
    let packaged = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, packaged.replace("runtime = \"apptainer\"", &format!("runtime = \"{runtime}\""))).unwrap();
}

fn lines(o: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect()
}

/// `packaging/build` against the running release's headers; the paths it printed.
fn build(what: &str, version: Option<&str>) -> Vec<String> {
    let mut cmd = std::process::Command::new(repo().join("packaging/build"));
    cmd.arg(what).env("SLURM_INCLUDE_DIR", format!("{}/usr/include", root_prefix()));
    if let Some(v) = version {
        cmd.env("SYNDEO_VERSION", v).env("SYNDEO_PKG_OUT", repo().join(format!("packaging/out/upgrade-{v}")));
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "packaging/build failed: {}", text(&o));
    lines(&o)
}

/// "22.05" -> "22.06", "24.11" -> "25.02" (Slurm's next release after it).
fn next_release(r: &str) -> String {
    let (major, minor) = r.split_once('.').unwrap();
    let (major, minor): (u32, u32) = (major.parse().unwrap(), minor.parse().unwrap());
    if minor >= 11 {
        format!("{}.02", major + 1)
    } else {
        format!("{major}.{:02}", minor + 1)
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn deb_and_rpm_are_built_for_the_running_slurm_and_the_installed_deb_runs_the_job() {
    let (rel, runtime) = (release(), runtime());
    let paths = build("all", None);
    let deb = paths.iter().find(|p| p.ends_with(".deb")).expect("a .deb path").clone();
    let rpm = paths.iter().find(|p| p.ends_with(".rpm")).expect("an .rpm path").clone();
    assert!(deb.contains(&format!("+slurm{rel}_")), "{deb}");

    // The RPM names the Slurm it was built for and requires it.
    let rpm_release = text(&run(&["rpm", "-qp", "--qf", "%{RELEASE}", &rpm]));
    assert!(rpm_release.contains(&format!("slurm{rel}")), "RPM release: {rpm_release}");
    let requires = text(&run(&["rpm", "-qp", "--requires", &rpm]));
    let next = next_release(&rel);
    assert!(
        requires.contains(&format!("slurm >= {rel}")) && requires.contains(&format!("slurm < {next}")),
        "{requires}"
    );
    let files = text(&run(&["rpm", "-qlp", &rpm]));
    for f in [
        "/usr/lib64/slurm/syndeo.so",
        "/usr/libexec/syndeo/syndeo-agent",
        "/usr/libexec/syndeo/syndeo-preload.so",
        "/etc/slurm/plugstack.conf.d/syndeo.conf",
        "/etc/syndeo/syndeo.toml",
        "/usr/share/man/man1/syndeo.1.gz",
        "/usr/share/man/man8/syndeo-agent.8.gz",
    ] {
        assert!(files.contains(f), "RPM lacks {f}: {files}");
    }
    let conf = text(&run(&["rpm", "-qcp", &rpm]));
    assert!(conf.contains("/etc/syndeo/syndeo.toml") && conf.contains("plugstack.conf.d/syndeo.conf"), "{conf}");
    let depends = text(&run(&["dpkg-deb", "-f", &deb, "Depends"]));
    assert!(
        depends.contains(&format!("slurm-wlm-basic-plugins (>= {rel}~)")) && depends.contains(&format!("(<< {next}~)")),
        "{depends}"
    );

    // Install the deb (in the release's root) over the dev install with the
    // package's own config files, then pick the minicluster's runtime.
    let _installed = Installed::deb(&deb);
    for f in [
        "/usr/lib/x86_64-linux-gnu/slurm-wlm/syndeo.so",
        "/etc/slurm/plugstack.conf.d/syndeo.conf",
        "/etc/syndeo/syndeo.toml",
    ] {
        let owner = text(&in_release(&["dpkg", "-S", f]));
        assert!(owner.starts_with("syndeo:"), "{owner}");
    }
    let packaged = std::fs::read_to_string(format!("{}/etc/syndeo/syndeo.toml", root_prefix())).unwrap();
    assert!(packaged.contains("runtime = \"apptainer\""), "Apptainer is the packaged default");
    use_the_minicluster_runtime(&runtime);
    let o = run(&[minicluster().to_str().unwrap(), "restart"]);
    assert!(o.status.success(), "{}", text(&o));

    let image = image();
    let dir = workdir(user_a(), "packaged");
    write_file(user_a(), &dir.join("driver.py"), DRIVER);
    let job = sbatch(
        user_a(),
        &dir,
        &["-N3", &format!("--syndeo={image}")],
        "#!/bin/bash\nsrun --syndeo -N1 -n1 python3 driver.py\n",
    );
    let state = job.wait(Duration::from_secs(300));

    assert_eq!(state, "COMPLETED", "{}", job.output());
    assert!(job.stdout().contains("PACKAGED_HOSTS node1,node2,node3"), "{}", job.output());
    assert!(leftovers(job.id, user_a()).is_empty(), "{:?}", leftovers(job.id, user_a()));
}

/// A syndeo job runs on the packaged syndeo; a newer package is installed
/// under it. Its steps still get the cluster (the new plugin talks to the
/// old agents), an agent killed afterwards is restarted from the binary it
/// runs (the file was replaced) and rejoins, and the next job runs on the
/// new package.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn installing_a_newer_package_under_a_running_job_breaks_none_of_it() {
    let runtime = runtime();
    let find_deb = |paths: Vec<String>| paths.into_iter().find(|p| p.ends_with(".deb")).expect("a .deb path");
    let old = find_deb(build("deb", None));
    let new = find_deb(build("deb", Some("0.1.99")));
    let _installed = Installed::deb(&old);
    use_the_minicluster_runtime(&runtime);
    let o = run(&[minicluster().to_str().unwrap(), "restart"]);
    assert!(o.status.success(), "{}", text(&o));
    let image = image();
    let dir = workdir(user_a(), "upgrade");
    let count = "python3 -c 'import ray; ray.init(); print(\"ALIVE\", len({n[\"NodeManagerAddress\"] for n in ray.nodes() if n[\"Alive\"]}))'";
    let script = format!(
        "#!/bin/bash\necho READY\nfor i in $(seq 1200); do [ -e go ] && break; sleep 0.25; done\nsrun --syndeo -N1 -n1 -w node1 {count}\n"
    );
    let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={image}")], &script);
    let _cancel = CancelOnDrop(vec![job.id]);
    job.wait_line("READY", Duration::from_secs(300));
    dpkg_install(&new, "--force-confold");
    assert!(text(&in_release(&["dpkg-query", "-W", "syndeo"])).contains("0.1.99"), "the new package is not installed");
    let agent = agent_pid(job.id, "node2").expect("the agent on node2");
    run(&["kill", "-KILL", &agent.to_string()]);
    job.wait_stderr("rejoined the cluster", Duration::from_secs(120));
    write_file(user_a(), &dir.join("go"), "");
    assert_eq!(job.wait(Duration::from_secs(180)), "COMPLETED", "{}", job.output());
    assert!(job.stdout().contains("ALIVE 2"), "{}", job.output());
    assert!(leftovers(job.id, user_a()).is_empty(), "{:?}", leftovers(job.id, user_a()));
    let next = sbatch(
        user_a(),
        &dir,
        &["-N2", &format!("--syndeo={image}")],
        &format!("#!/bin/bash\nsrun --syndeo -N1 -n1 {count}\n"),
    );
    assert_eq!(next.wait(Duration::from_secs(300)), "COMPLETED", "{}", next.output());
    assert!(next.stdout().contains("ALIVE 2"), "{}", next.output());
}
