//! Security and multi-tenancy on the minicluster, with two unprivileged users:
//! every cluster takes only its own token, every syndeo process is the job
//! user's with no capability and no_new_privs, two users' jobs on the same
//! nodes cannot reach each other, and hostile input is refused or harmless.
use std::path::Path;
use std::time::Duration;

use syndeo_tests::*;

/// A's job: prints its cluster's address and token, holds the cluster until
/// the test creates `release`, then runs a driver on it.
const HOLDING_SCRIPT: &str = r#"#!/bin/bash
echo "ADDR=$RAY_ADDRESS"
echo "TOKEN=$RAY_AUTH_TOKEN"
for i in $(seq 1200); do [ -e release ] && break; sleep 0.25; done
srun --syndeo -N1 -n1 python3 -c 'import ray; ray.init(); print("OWN_NODES", len([n for n in ray.nodes() if n["Alive"]]))'
"#;

/// B's driver: tries A's cluster with B's own token, then with none.
const INTRUDER: &str = r#"
import os, sys, ray
addr = sys.argv[1]
for label, env in (("B_TOKEN", {}), ("NO_TOKEN", {"RAY_AUTH_TOKEN": None})):
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
    try:
        ray.init(address=addr)
        print(label, "JOINED", len(ray.nodes()), flush=True)
        ray.shutdown()
    except Exception as e:
        print(label, "REFUSED", type(e).__name__, flush=True)
"#;

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn two_users_on_the_same_nodes_share_nothing_and_cannot_reach_each_other() {
    let image = image();
    let dir_a = workdir(user_a(), "tenant-a");
    let a = sbatch(user_a(), &dir_a, &["-N3", &format!("--syndeo={image}")], HOLDING_SCRIPT);
    let addr_a = a.wait_line("ADDR=", Duration::from_secs(300));
    let token_a = a.wait_line("TOKEN=", Duration::from_secs(10));
    assert!(token_a.len() >= 32, "A's job has no Ray token: {}", a.output());

    let dir_b = workdir(user_b(), "tenant-b");
    write_file(user_b(), &dir_b.join("intruder.py"), INTRUDER);
    let script_b = format!(
        r#"#!/bin/bash
echo "ADDR=$RAY_ADDRESS"
for p in /run/syndeo/{id} /run/syndeo/{id}/ray_token /run/syndeo/{id}/agent.sock /tmp/syndeo/{id} /run/syndeo-shm/{id}; do
    if cat "$p" >/dev/null 2>&1 || ls "$p" >/dev/null 2>&1; then echo "READABLE $p"; else echo "DENIED $p"; fi
done
srun --syndeo -N1 -n1 timeout 150 python3 intruder.py {addr_a}
"#,
        id = a.id
    );
    let b = sbatch(user_b(), &dir_b, &["-N3", &format!("--syndeo={image}")], &script_b);
    let state_b = b.wait(Duration::from_secs(400));
    let out_b = b.output();

    // While A's cluster runs: its processes, and no secret on any command line.
    let procs = marked_processes(a.id);
    let cmdlines = all_cmdlines();
    write_file(user_a(), &dir_a.join("release"), "");
    let state_a = a.wait(Duration::from_secs(300));

    assert_eq!(state_b, "COMPLETED", "{out_b}");
    let addr_b = b.stdout().lines().find_map(|l| l.strip_prefix("ADDR=").map(str::to_string)).unwrap_or_default();
    assert!(
        addr_b.starts_with(&format!("{}.", bridge_prefix())) && addr_b != addr_a,
        "B's cluster must be its own: A {addr_a}, B {addr_b}"
    );
    assert!(!out_b.contains("READABLE"), "B could read A's files: {out_b}");
    assert_eq!(out_b.matches("DENIED").count(), 5, "{out_b}");
    assert!(out_b.contains("B_TOKEN REFUSED"), "B joined A's cluster with its own token: {out_b}");
    assert!(out_b.contains("NO_TOKEN REFUSED"), "B joined A's cluster without a token: {out_b}");
    assert!(!out_b.contains("JOINED"), "{out_b}");
    assert!(b.stderr().contains("Authentication token is missing or incorrect"), "refused for another reason: {out_b}");

    assert_eq!(state_a, "COMPLETED", "{}", a.output());
    assert!(a.stdout().contains("OWN_NODES 3"), "A's own driver must still work: {}", a.output());

    let leaked: Vec<&(i32, String)> = cmdlines.iter().filter(|(_, c)| c.contains(&token_a)).collect();
    assert!(leaked.is_empty(), "A's Ray token is on a command line: {leaked:?}");

    let (uid_a, groups_a) = user_ids(user_a());
    assert!(procs.len() >= 6, "expected agent, runtime and Ray processes on 3 nodes, found {procs:?}");
    for pid in procs {
        let what = proc_cmdline(pid);
        let Some(uid) = proc_status(pid, "Uid") else { continue }; // ended meanwhile
        assert!(uid.split_whitespace().all(|u| u == uid_a.to_string()), "{pid} {what}: Uid {uid}");
        assert_eq!(proc_status(pid, "CapEff").as_deref(), Some("0000000000000000"), "{pid} {what}");
        assert_eq!(proc_status(pid, "CapPrm").as_deref(), Some("0000000000000000"), "{pid} {what}");
        assert_eq!(proc_status(pid, "NoNewPrivs").as_deref(), Some("1"), "{pid} {what}");
        let groups = proc_status(pid, "Groups").unwrap_or_default();
        for g in groups.split_whitespace() {
            // Inside a user namespace unmapped groups show as the overflow gid.
            let g: u32 = g.parse().unwrap();
            assert!(
                groups_a.contains(&g) || g == 65534,
                "{pid} {what}: group {g} is not {user_a}'s ({groups_a:?})",
                user_a = user_a()
            );
        }
    }
    for job in [a.id, b.id] {
        let left = leftovers(job, if job == a.id { user_a() } else { user_b() });
        assert!(left.is_empty(), "job {job} left: {left:#?}");
    }
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn image_that_root_can_read_but_the_user_cannot_is_refused() {
    let image = image();
    // Made where the nodes see it: inside the release's root, if it has one.
    let private = "/var/lib/syndeo-test-private";
    let on_nodes = format!("{}{private}", root_prefix());
    run(&["install", "-d", "-m", "0700", "-o", "root", &on_nodes]);
    run(&["ln", "-sfn", &image, &format!("{on_nodes}/ray")]);
    let dir = workdir(user_a(), "private-image");
    let job = sbatch(user_a(), &dir, &["-N1", &format!("--syndeo={private}/ray")], SCRIPT_RAN);
    job.assert_refused(Duration::from_secs(120), &format!("image {private}/ray is not readable by you"));
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

/// A sandbox another user owns (they could change it while the job runs
/// it) fails the job naming the image and its owner; with Apptainer, so do a
/// file that is not a SIF and a SIF cut short (its header is Apptainer's, so
/// Apptainer itself finds the damage). None of them drains a node.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn another_users_sandbox_and_damaged_sifs_each_fail_the_job_naming_the_image() {
    let shared = "/var/lib/syndeo-test-images";
    let on_nodes = format!("{}{shared}", root_prefix());
    let _ = std::fs::remove_dir_all(&on_nodes);
    run(&["install", "-d", "-m", "0755", "-o", "root", &on_nodes]);
    let theirs = format!("{on_nodes}/b-sandbox");
    std::fs::create_dir_all(format!("{theirs}/usr/bin")).unwrap();
    run(&["chown", "-R", &format!("{user_b}:{user_b}", user_b = user_b()), &theirs]);
    let mut cases = vec![(
        format!("{shared}/b-sandbox"),
        format!("image {shared}/b-sandbox belongs to another user ({user_b})", user_b = user_b()),
    )];
    if runtime() == "apptainer" {
        std::fs::write(format!("{on_nodes}/junk.sif"), "not an image\n".repeat(10)).unwrap();
        cases.push((format!("{shared}/junk.sif"), format!("image {shared}/junk.sif is neither a SIF file")));
        let mut head = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(std::fs::File::open(image()).unwrap(), 1 << 20), &mut head)
            .unwrap();
        std::fs::write(format!("{on_nodes}/cut.sif"), head).unwrap();
        cases.push((format!("{shared}/cut.sif"), format!("the container of image {shared}/cut.sif ended early")));
    }
    for (image, says) in cases {
        let dir = workdir(user_a(), "bad-image");
        let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={image}")], SCRIPT_RAN);
        job.assert_refused(Duration::from_secs(180), &says);
        assert_clean(&job, user_a());
    }
    let _ = std::fs::remove_dir_all(&on_nodes);
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn shell_metacharacters_in_the_image_are_data_not_commands() {
    let dir = workdir(user_a(), "metachar");
    let canary = format!("/home/{user_a}/syndeo-tests/PWNED", user_a = user_a());
    let _ = std::fs::remove_file(&canary);
    let value = format!("/nonexistent/a;touch {canary};$(touch {canary})`touch {canary}`|x&");
    let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={value}")], "#!/bin/sh\necho SCRIPT RAN\n");
    let state = job.wait(Duration::from_secs(120));
    let out = job.output();
    assert_ne!(state, "COMPLETED", "{out}");
    assert!(out.contains("does not exist"), "{out}");
    assert!(!std::path::Path::new(&canary).exists(), "a metacharacter in --syndeo ran a command");
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn overlong_and_dotdot_images_are_refused_at_submit() {
    let dir = workdir(user_a(), "hostile-submit");
    write_file(user_a(), &dir.join("job.sh"), "#!/bin/sh\ntrue\n");
    let long = format!("--syndeo=/{}", "a".repeat(5000));
    for (arg, says) in [(long.as_str(), "the limit is 4096"), ("--syndeo=/shared/../etc/shadow", "`..` component")] {
        let o = as_user(user_a(), &dir, &["sbatch", "-N1", arg, "job.sh"]);
        assert!(!o.status.success(), "sbatch accepted {arg:.40}");
        assert!(text(&o).contains(says), "{}", text(&o));
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_users_link_squatting_the_temp_base_is_moved_aside_not_followed() {
    let image = image();
    let node = "node1";
    let trap = format!("/home/{user_b}/trap", user_b = user_b());
    let _ = std::fs::remove_dir_all(&trap);
    run(&["install", "-d", "-o", user_b(), "-g", user_b(), &trap]);
    // No job runs now: as B, plant a link where root makes its temp base.
    in_node(node, &["rm", "-rf", "/tmp/syndeo"]);
    let o = in_node(node, &["runuser", "-u", user_b(), "--", "ln", "-s", &trap, "/tmp/syndeo"]);
    assert!(o.status.success(), "{}", text(&o));

    let dir = workdir(user_a(), "squat");
    let job = sbatch(
        user_a(),
        &dir,
        &["-N1", "-w", node, &format!("--syndeo={image}")],
        "#!/bin/sh\necho CLUSTER=$RAY_ADDRESS\n",
    );
    let state = job.wait(Duration::from_secs(180));
    assert_eq!(state, "COMPLETED", "{}", job.output());
    assert!(job.stdout().contains(&format!("CLUSTER={}.", bridge_prefix())), "{}", job.output());
    let planted: Vec<_> = std::fs::read_dir(&trap).unwrap().flatten().map(|e| e.path()).collect();
    assert!(planted.is_empty(), "root wrote through B's link: {planted:?}");
    let o = in_node(node, &["stat", "-c", "%U %F", "/tmp/syndeo"]);
    assert_eq!(text(&o).trim(), "root directory", "the temp base must be root's again");
    assert!(drained_nodes().is_empty(), "a user's link drained a node: {:?}", drained_nodes());
    in_node(node, &["sh", "-c", "rm -f /tmp/syndeo.untrusted-*"]);
}

/// Holds the cluster until `release` appears; prints what the tests need.
const DASHBOARD_HOLD: &str = r#"#!/bin/bash
echo "DASHBOARD=$SYNDEO_DASHBOARD_URL"
echo "TOKEN=$RAY_AUTH_TOKEN"
for i in $(seq 1200); do [ -e release ] && break; sleep 0.25; done
"#;

/// `ray.init("ray://ADDR")` from inside one's own job, with one's own token.
const CLIENT: &str = r#"
import sys, ray
try:
    ray.init("ray://" + sys.argv[1])
    print("CLIENT JOINED", int(ray.cluster_resources()["CPU"]))
except Exception as e:
    print("CLIENT REFUSED", type(e).__name__)
"#;

/// From B's job: A's agent's mesh `Join`, for A's job, as plain gRPC (grpcio
/// is in the ray[default] image; the request hand-encoded), and a TLS
/// handshake without the job's certificate (Python's ssl). Both are refused
/// before any request is read.
const MESH_INTRUDER: &str = r#"
import socket, ssl, sys, grpc
addr, job = sys.argv[1], int(sys.argv[2])
def varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([b])
        out += bytes([b | 0x80])
node = b"node2"
request = b"\x08" + varint(job) + b"\x12" + bytes([len(node)]) + node
join = grpc.insecure_channel(addr).unary_unary("/syndeo.mesh.Mesh/Join")
try:
    join(request, timeout=10)
    print("MESH PLAIN ANSWERED")
except grpc.RpcError as e:
    print("MESH PLAIN", e.code().name)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
host, port = addr.rsplit(":", 1)
try:
    with ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=10)) as s:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        print("MESH TLS", "ANSWERED" if s.recv(100) else "CLOSED")
except (OSError, ssl.SSLError) as e:
    print("MESH TLS REFUSED", type(e).__name__)
"#;

/// As user B, an HTTP GET of a dashboard's job list with a bearer token or
/// none; the HTTP status.
fn dashboard_status(url: &str, token: Option<&str>) -> String {
    const GET: &str = r#"
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1] + "/api/jobs/")
if len(sys.argv) > 2:
    req.add_header("Authorization", "Bearer " + sys.argv[2])
try:
    print(urllib.request.urlopen(req, timeout=10).status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception as e:
    print("ERROR", e)
"#;
    let mut argv = vec!["python3", "-c", GET, url];
    argv.extend(token);
    text(&as_user(user_b(), Path::new("/tmp"), &argv)).trim().to_string()
}

/// The Ray client server's address of `job`'s head on node1 (Ray starts it
/// beside the head; it may come up after the cluster is ready).
fn client_server_address(job: u32) -> String {
    let t = std::time::Instant::now();
    let pid = loop {
        if let Some(p) = job_process(job, "node1", "/usr/bin/python3 -m ray.util.client.server") {
            break p;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "job {job}: no Ray client server on node1");
        std::thread::sleep(Duration::from_millis(250));
    };
    let argv = proc_cmdline(pid);
    let arg = |k: &str| argv.split_whitespace().find_map(|a| a.strip_prefix(k)).unwrap_or_default().to_string();
    format!("{}:{}", arg("--host="), arg("--port="))
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn with_the_dashboard_and_client_server_on_two_users_jobs_share_no_port_and_neither_reaches_the_others_cluster_or_agent(
) {
    let image = image_with_ray_default();
    let _dashboard = ConfigOverride::set("dashboard", "true");
    let (dir_a, dir_b) = (workdir(user_a(), "dashboard-a"), workdir(user_b(), "dashboard-b"));
    let a = sbatch(user_a(), &dir_a, &["-N2", &format!("--syndeo={image}")], DASHBOARD_HOLD);
    let b = sbatch(user_b(), &dir_b, &["-N2", &format!("--syndeo={image}")], DASHBOARD_HOLD);
    let _cancel = CancelOnDrop(vec![a.id, b.id]);
    let url_a = a.wait_line("DASHBOARD=", Duration::from_secs(300));
    let url_b = b.wait_line("DASHBOARD=", Duration::from_secs(300));
    let token_a = a.wait_line("TOKEN=", Duration::from_secs(10));
    let token_b = b.wait_line("TOKEN=", Duration::from_secs(10));
    assert!(
        url_a.starts_with(&format!("http://{}.", bridge_prefix()))
            && url_b.starts_with(&format!("http://{}.", bridge_prefix()))
            && url_a != url_b,
        "{url_a} {url_b}"
    );
    let (client_a, client_b) = (client_server_address(a.id), client_server_address(b.id));
    assert!(
        client_a != client_b && !client_a.ends_with(":10001") && !client_b.ends_with(":10001"),
        "{client_a} {client_b}"
    );
    // Picked from ray_ports (20000-32767), below the kernel's ephemeral range.
    for addr in [&url_a, &url_b, &client_a, &client_b] {
        let port: u16 = addr.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0);
        assert!((20000..=32767).contains(&port), "{addr} is not in ray_ports");
    }

    // A's dashboard: B, with its own token or none, is refused; A's token is served.
    // (Ray answers 401 to a request without a token, 403 to a wrong one.)
    assert_eq!(dashboard_status(&url_a, None), "401", "no token");
    assert_eq!(dashboard_status(&url_a, Some(&token_b)), "403", "B's token");
    assert_eq!(dashboard_status(&url_a, Some(&token_a)), "200", "A's own token (the dashboard is up)");

    // A's client server: B's driver, in B's job with B's token, cannot join; A's can.
    write_file(user_b(), &dir_b.join("client.py"), CLIENT);
    write_file(user_a(), &dir_a.join("client.py"), CLIENT);
    let step = |user: &str, dir: &Path, job: u32| {
        let id = job.to_string();
        let argv = [
            "srun",
            "--jobid",
            &id,
            "--overlap",
            "--syndeo",
            "-N1",
            "-n1",
            "-w",
            "node2",
            "python3",
            "client.py",
            &client_a,
        ];
        text(&as_user(user, dir, &argv))
    };
    let by_b = step(user_b(), &dir_b, b.id);
    // The control: A's own driver joins. Ray's client proxy now and then
    // aborts a first connection while it starts the per-client server; the
    // control may try three times (B's refusal above is a timeout, not that).
    let by_a = (0..3).map(|_| step(user_a(), &dir_a, a.id)).find(|o| o.contains("CLIENT JOINED")).unwrap_or_default();
    assert!(by_b.contains("CLIENT REFUSED") && !by_b.contains("CLIENT JOINED"), "{by_b}");
    assert!(by_a.contains("CLIENT JOINED 2"), "A's own client must work: {by_a}");

    // A's agent: B calls its mesh for A's job, as plain gRPC and over TLS
    // without the job's certificate.
    write_file(user_b(), &dir_b.join("mesh.py"), MESH_INTRUDER);
    let (mesh_a, id_a, id_b) = (mesh_address(a.id, "node1"), a.id.to_string(), b.id.to_string());
    let argv = [
        "srun",
        "--jobid",
        &id_b,
        "--overlap",
        "--syndeo",
        "-N1",
        "-n1",
        "-w",
        "node2",
        "python3",
        "mesh.py",
        &mesh_a,
        &id_a,
    ];
    let mesh_by_b = text(&as_user(user_b(), &dir_b, &argv));
    assert!(mesh_by_b.contains("MESH PLAIN UNAVAILABLE"), "{mesh_by_b}");
    assert!(mesh_by_b.contains("MESH TLS REFUSED") || mesh_by_b.contains("MESH TLS CLOSED"), "{mesh_by_b}");
    assert!(!mesh_by_b.contains("ANSWERED"), "{mesh_by_b}");
    let log_a = text(&in_node("node1", &["cat", &format!("/run/syndeo/{}/agent.log", a.id)]));
    assert!(
        log_a.contains("refused a connection that did not prove it is this job's agent"),
        "A's agent did not log the refusal"
    );

    write_file(user_a(), &dir_a.join("release"), "");
    write_file(user_b(), &dir_b.join("release"), "");
    for (job, user) in [(&a, user_a()), (&b, user_b())] {
        assert_eq!(job.wait(Duration::from_secs(180)), "COMPLETED", "{}", job.output());
        let left = leftovers(job.id, user);
        assert!(left.is_empty(), "job {} left: {left:#?}", job.id);
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn an_image_outside_the_sites_allowed_dirs_fails_the_job_naming_them_and_drains_nothing() {
    let image = image();
    let dir = workdir(user_a(), "allow-list");
    let job = {
        let _only = ConfigOverride::set("allowed_image_dirs", "[\"/srv/syndeo-images\"]");
        let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={image}")], "#!/bin/sh\necho SCRIPT RAN\n");
        job.wait(Duration::from_secs(180));
        job
    };
    let out = job.output();
    assert!(!out.contains("SCRIPT RAN"), "{out}");
    assert!(
        out.contains("is outside the directories this site allows for images") && out.contains("/srv/syndeo-images"),
        "{out}"
    );
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
    let left = leftovers(job.id, user_a());
    assert!(left.is_empty(), "job {} left: {left:#?}", job.id);
}
