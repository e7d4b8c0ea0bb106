//! `pvfs top` driven in a terminal (tmux, on a server of its own): it shows every
//! server with the rates of the work a client does meanwhile, refreshes, and quits
//! on `q`, giving the terminal back.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{have_command, poll, scaled, skip, under_ci, Cluster};

/// tmux on a socket of this test's own: its server, sessions and end are ours alone.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap()
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// The row of server `name` on `screen`, cut into its columns.
fn row(screen: &str, name: &str) -> Option<Vec<String>> {
    screen.lines().find_map(|l| {
        let cols: Vec<String> = l
            .trim_matches(|c: char| c == '│' || c.is_whitespace())
            .split_whitespace()
            .map(str::to_string)
            .collect();
        (cols.first().map(String::as_str) == Some(name)).then_some(cols)
    })
}

#[test]
fn top_shows_every_servers_rates_and_quits_on_q() {
    if !have_command("tmux") {
        let why = "tmux is not installed (scripts/install-deps installs it)";
        assert!(!under_ci(), "{why}");
        skip("top_shows_every_servers_rates_and_quits_on_q", why);
        return;
    }
    let cluster = Cluster::start();
    let tmux = Tmux {
        socket: format!("pvfs-top-{}", std::process::id()),
    };
    let cmd = format!(
        "{} top -c {} --interval 300ms",
        common::pvfs_bin(),
        cluster.config_str()
    );
    let out = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "150",
        "-y",
        "20",
        &cmd,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A client writes all along.
    let stop = Arc::new(AtomicBool::new(false));
    // Stopped however the test ends, before the cluster goes.
    struct Stop(Arc<AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let _stop = Stop(stop.clone());
    let writer = {
        let stop = stop.clone();
        let config = cluster.config_str().to_string();
        let local = cluster.dir().join("w.bin");
        std::fs::write(&local, vec![7u8; 1 << 20]).unwrap();
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let dst = format!("pvfs:/w{}", i % 4);
                let st = Command::new(common::pvfs_bin())
                    .args(["cp", "-q", local.to_str().unwrap(), &dst, "-c", &config])
                    .status()
                    .unwrap();
                assert!(st.success() || stop.load(Ordering::Relaxed));
                i += 1;
            }
        })
    };
    // Every server has its row; the written bytes show on some.
    let names = cluster.names();
    let deadline = std::time::Instant::now() + scaled(Duration::from_secs(60));
    let screen = loop {
        let s = tmux.screen();
        let rows: Vec<_> = names.iter().map(|n| row(&s, n)).collect();
        let all = rows
            .iter()
            .all(|r| r.as_ref().is_some_and(|c| c.len() >= 8));
        let writing = rows
            .iter()
            .flatten()
            .filter(|c| c.len() >= 8)
            .any(|c| c[4] != "0/s" && c[1].parse::<f64>().is_ok_and(|r| r > 0.0));
        if all && writing {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "top never showed every server and the writes:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        screen.contains("req/s") && screen.contains("p99"),
        "{screen}"
    );
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    // q quits: the session (whose only program is top) ends.
    tmux.run(&["send-keys", "-t", "top", "q"]);
    poll("top quits", scaled(Duration::from_secs(10)), || {
        (!tmux.run(&["has-session", "-t", "top"]).status.success()).then_some(())
    });
}
