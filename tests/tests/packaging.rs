//! Packaging: `packaging/build` makes a deb and an RPM for the Slurm release
//! it was built against, and the deb, installed on the minicluster in place of
//! the dev install, runs the end-to-end job.
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

/// The deb installed in place of the dev install; dropped (even by a failing
/// assertion), it purges the package and puts the dev install back.
struct Installed;

impl Installed {
    fn deb(deb: &str) -> Installed {
        run(&["dpkg", "--purge", "syndeo"]); // a run that died earlier may have left it
        let o = std::process::Command::new("dpkg")
            .args(["-i", "--force-confnew", deb])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(o.status.success(), "dpkg -i: {}", text(&o));
        Installed
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let purged = run(&["dpkg", "--purge", "syndeo"]);
        let up = run(&[minicluster().to_str().unwrap(), "up"]);
        if !std::thread::panicking() {
            assert!(purged.status.success(), "dpkg --purge: {}", text(&purged));
            assert!(up.status.success(), "{}", text(&up));
        }
    }
}

fn lines(o: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect()
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn deb_and_rpm_are_built_for_this_slurm_and_the_installed_deb_runs_the_job() {
    let o = run(&[repo().join("packaging/build").to_str().unwrap()]);
    assert!(o.status.success(), "packaging/build failed: {}", text(&o));
    let paths = lines(&o);
    let deb = paths.iter().find(|p| p.ends_with(".deb")).expect("a .deb path").clone();
    let rpm = paths.iter().find(|p| p.ends_with(".rpm")).expect("an .rpm path").clone();

    // The RPM names the Slurm it was built for and requires it.
    let release = text(&run(&["rpm", "-qp", "--qf", "%{RELEASE}", &rpm]));
    assert!(release.contains("slurm22.05"), "RPM release: {release}");
    let requires = text(&run(&["rpm", "-qp", "--requires", &rpm]));
    assert!(requires.contains("slurm >= 22.05") && requires.contains("slurm < 22.06"), "{requires}");
    let files = text(&run(&["rpm", "-qlp", &rpm]));
    for f in [
        "/usr/lib64/slurm/syndeo.so",
        "/usr/libexec/syndeo/syndeo-agent",
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
    assert!(depends.contains("slurm-wlm-basic-plugins (>= 22.05~)") && depends.contains("(<< 22.06~)"), "{depends}");

    // Install the deb over the dev install with the package's own config files,
    // then do what an admin here must: pick bubblewrap (no Apptainer on this machine).
    let _installed = Installed::deb(&deb);
    for f in [
        "/usr/lib/x86_64-linux-gnu/slurm-wlm/syndeo.so",
        "/etc/slurm/plugstack.conf.d/syndeo.conf",
        "/etc/syndeo/syndeo.toml",
    ] {
        let owner = text(&run(&["dpkg", "-S", f]));
        assert!(owner.starts_with("syndeo:"), "{owner}");
    }
    let packaged = std::fs::read_to_string("/etc/syndeo/syndeo.toml").unwrap();
    assert!(packaged.contains("runtime = \"apptainer\""), "Apptainer is the packaged default");
    std::fs::write("/etc/syndeo/syndeo.toml", packaged.replace("runtime = \"apptainer\"", "runtime = \"bubblewrap\""))
        .unwrap();
    let o = run(&[minicluster().to_str().unwrap(), "restart"]);
    assert!(o.status.success(), "{}", text(&o));

    let image = image();
    let dir = workdir(USER_A, "packaged");
    write_file(USER_A, &dir.join("driver.py"), DRIVER);
    let job = sbatch(
        USER_A,
        &dir,
        &["-N3", &format!("--syndeo={image}")],
        "#!/bin/bash\nsrun --syndeo -N1 -n1 python3 driver.py\n",
    );
    let state = job.wait(Duration::from_secs(300));

    assert_eq!(state, "COMPLETED", "{}", job.output());
    assert!(job.stdout().contains("PACKAGED_HOSTS node1,node2,node3"), "{}", job.output());
    assert!(leftovers(job.id, USER_A).is_empty(), "{:?}", leftovers(job.id, USER_A));
}
