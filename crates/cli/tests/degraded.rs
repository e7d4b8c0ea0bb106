//! With one server down: `ls -l` lists what the live
//! servers hold and says which server is missing, within the deadline; `df` and `ping`
//! report the dead server and the live ones.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{scaled, Cluster};
use pvfs_client::LayoutSpec;

#[test]
fn ls_df_and_ping_show_what_the_live_servers_know() {
    let cluster = Cluster::builder()
        .request_timeout(&format!("{}ms", scaled(Duration::from_secs(2)).as_millis()))
        .connect_timeout(&format!("{}ms", scaled(Duration::from_secs(1)).as_millis()))
        .start();
    // Bound on each command with the server down (timeouts above, plus start-up).
    let bound = scaled(Duration::from_secs(4));
    let tc = cluster.client();
    let names: Vec<String> = (0..40).map(|i| format!("f{i:02}")).collect();
    tc.run(Duration::from_secs(60), async |c| {
        c.mkdir("/d", 0o755).await.unwrap();
        for n in &names {
            c.create(&format!("/d/{n}"), 0o644, LayoutSpec::default(), true)
                .await
                .unwrap();
        }
    });
    // /d lives on some server; kill another one, which holds part of /d's entries.
    let dir_owner = {
        let h = tc.run(Duration::from_secs(10), async |c| {
            c.stat("/d").await.unwrap().handle
        });
        cluster.config().owner_of(h).unwrap()
    };
    let victim = cluster.names()[(dir_owner + 1) % 4].clone();
    cluster.kill(&victim, libc::SIGKILL);

    let out = cluster.run_cli(&["ls", "-l", "/d"]);
    assert!(
        !out.status.success(),
        "ls of a partly unreachable directory should fail"
    );
    assert!(out.elapsed < bound, "ls took {:?}", out.elapsed);
    let listed: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert!(
        !listed.is_empty() && listed.len() < names.len(),
        "listed {} of {}",
        listed.len(),
        names.len()
    );
    assert!(listed.iter().all(|n| names.iter().any(|m| m == n)));
    assert!(
        out.stderr.contains("listing incomplete") && out.stderr.contains(&victim),
        "stderr does not name the missing server {victim}: {}",
        out.stderr
    );

    let df = cluster.run_cli(&["df"]);
    assert!(df.elapsed < bound, "df took {:?}", df.elapsed);
    for n in cluster.names() {
        assert!(
            df.stdout.contains(&n),
            "df does not mention {n}: {}",
            df.stdout
        );
    }
    let ping = cluster.run_cli(&["ping"]);
    assert!(!ping.status.success());
    assert!(ping.elapsed < bound, "ping took {:?}", ping.elapsed);
    let down: Vec<&str> = ping
        .stdout
        .lines()
        .filter(|l| !l.trim_end().ends_with("ok"))
        .collect();
    assert_eq!(
        down.len(),
        1,
        "exactly one server should be reported down: {}",
        ping.stdout
    );
    assert!(down[0].starts_with(&victim), "{}", ping.stdout);
}
