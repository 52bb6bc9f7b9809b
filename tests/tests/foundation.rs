//! Foundation: the plugin loads in real Slurm (slurmctld + 3 slurmd), adds
//! --syndeo to srun/sbatch/salloc, refuses bad values at submit, and runs its
//! prolog/epilog hooks on every node of a syndeo job, and only of those.
use std::time::Duration;

use syndeo_tests::*;

fn help_lists_syndeo(cmd: &str) {
    let o = run(&[cmd, "--help"]);
    let t = text(&o);
    let line =
        t.lines().find(|l| l.contains("--syndeo")).unwrap_or_else(|| panic!("{cmd} --help has no --syndeo:\n{t}"));
    assert!(line.contains("IMAGE"), "usage line should name IMAGE: {line}");
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn sbatch_srun_and_salloc_help_list_the_syndeo_option() {
    for cmd in ["sbatch", "srun", "salloc"] {
        help_lists_syndeo(cmd);
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn relative_image_is_refused_at_submit_with_a_syndeo_message() {
    let dir = workdir(user_a(), "relative");
    write_file(user_a(), &dir.join("job.sh"), "#!/bin/sh\ntrue\n");
    let before = text(&run(&["squeue", "-h", "-u", user_a(), "-o", "%i"]));
    let o = as_user(user_a(), &dir, &["sbatch", "-N1", "--syndeo=images/ray", "job.sh"]);
    let t = text(&o);
    assert!(!o.status.success(), "sbatch accepted a relative image: {t}");
    assert!(t.contains("syndeo: --syndeo IMAGE \"images/ray\" is not an absolute path"), "{t}");
    let after = text(&run(&["squeue", "-h", "-u", user_a(), "-o", "%i"]));
    assert_eq!(before, after, "a job was queued");
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn image_with_a_newline_is_refused_at_submit() {
    let dir = workdir(user_a(), "newline");
    write_file(user_a(), &dir.join("job.sh"), "#!/bin/sh\ntrue\n");
    let o = as_user(user_a(), &dir, &["sbatch", "-N1", "--syndeo=/img\n/x", "job.sh"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("control character"), "{}", text(&o));
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn prolog_and_epilog_hooks_run_on_all_three_nodes_of_a_syndeo_job() {
    let dir = workdir(user_a(), "hooks");
    let job = sbatch(user_a(), &dir, &["-N3", "--syndeo=/nonexistent/image"], "#!/bin/sh\ntrue\n");
    job.wait(Duration::from_secs(120));
    for n in nodes() {
        let log = slurmd_log(&n);
        assert!(log.contains(&format!("syndeo: prolog for job {}:", job.id)), "no prolog on {n}");
        assert!(log.contains(&format!("syndeo: epilog for job {}:", job.id)), "no epilog on {n}");
    }
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn job_without_syndeo_triggers_nothing() {
    let dir = workdir(user_a(), "plain");
    let job =
        sbatch(user_a(), &dir, &["-N3"], "#!/bin/sh\nsrun -N3 hostname\nenv | grep -c '^SYNDEO_\\|^RAY_' || true\n");
    assert_eq!(job.wait(Duration::from_secs(60)), "COMPLETED", "{}", job.output());
    assert_eq!(job.stdout().lines().last(), Some("0"), "syndeo variables leaked into a plain job: {}", job.output());
    for n in nodes() {
        let log = slurmd_log(&n);
        assert!(!log.contains(&format!("syndeo: prolog for job {}:", job.id)), "prolog ran on {n} for a plain job");
        assert!(!node_path_exists(&n, &format!("/run/syndeo/{}", job.id)));
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn installed_plugin_exports_only_the_symbols_slurm_looks_up() {
    let so = format!("{}/usr/lib/x86_64-linux-gnu/slurm-wlm/syndeo.so", root_prefix());
    let o = run(&["nm", "-D", "--defined-only", &so]);
    assert!(o.status.success(), "nm {so}: {}", text(&o));
    let symbols: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect();
    for required in [
        "plugin_name",
        "plugin_type",
        "plugin_version",
        "slurm_spank_init",
        "slurm_spank_job_prolog",
        "slurm_spank_job_epilog",
    ] {
        assert!(symbols.iter().any(|s| s == required), "{required} is not exported: {symbols:?}");
    }
    let extra: Vec<&String> = symbols
        .iter()
        .filter(|s| {
            !matches!(s.as_str(), "plugin_name" | "plugin_type" | "plugin_version") && !s.starts_with("slurm_spank_")
        })
        .collect();
    assert!(extra.is_empty(), "exported beyond the plugin's symbols: {extra:?}");
}
