//! Hosts made of network namespaces on this machine, for tests that cut a server off
//! the network (a partition) instead of killing or freezing its process.
//!
//! Every host is a network namespace of its own, held by a `sleep` child that dies with
//! the test: the clients' host (`10.0.0.1`, the test thread and every process it
//! starts) carries a bridge, and each server's host (`10.0.0.{i + 2}`) is linked to it
//! by a veth pair. [`Hosts::cut`] takes server `i`'s port on the bridge down: its
//! packets go nowhere, in both directions, with no error to either side until TCP
//! gives up (a switch port gone dark). [`Hosts::heal`] brings it back. Nothing is
//! added to the machine's own namespace: the namespaces, links and addresses go away
//! with the holders when the test ends, however it ends.
#![allow(dead_code)]
#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use super::{die_with_parent, have_command, is_root};

/// Network namespaces standing for one clients' host and `n` server hosts.
pub struct Hosts {
    /// The processes holding the namespaces: [0] the clients', [1 + i] server i's.
    holders: Vec<Child>,
    /// Their network namespaces, open (for `setns`).
    ns: Vec<File>,
    /// The namespace the entering thread was in, and that thread, to go back on drop.
    left: std::sync::Mutex<Option<(File, std::thread::ThreadId)>>,
}

/// Why hosts cannot be made here (not root, no `ip`), or None.
pub fn unavailable() -> Option<&'static str> {
    if !is_root() {
        return Some("network namespaces need root");
    }
    if !have_command("ip") {
        return Some("the `ip` command (iproute2) is not installed");
    }
    None
}

/// Moves the calling thread (or, in `pre_exec`, the child) into namespace `fd`.
fn enter(fd: i32) -> std::io::Result<()> {
    // SAFETY: setns(2) on a namespace descriptor we hold; async-signal-safe.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl Hosts {
    /// Makes the clients' host and `servers` server hosts, linked by a bridge.
    pub fn new(servers: usize) -> Hosts {
        let mut holders = Vec::new();
        let mut ns = Vec::new();
        for _ in 0..=servers {
            let mut cmd = Command::new("sleep");
            cmd.arg("infinity")
                .stdin(Stdio::null())
                .stdout(Stdio::null());
            die_with_parent(&mut cmd);
            // SAFETY: unshare(2) in the child before exec; allocates nothing.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::unshare(libc::CLONE_NEWNET) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let child = cmd.spawn().expect("cannot start a namespace holder");
            ns.push(File::open(format!("/proc/{}/ns/net", child.id())).unwrap());
            holders.push(child);
        }
        let hosts = Hosts {
            holders,
            ns,
            left: std::sync::Mutex::new(None),
        };
        hosts.ip(0, "link set lo up");
        hosts.ip(0, "link add br0 type bridge");
        hosts.ip(0, "link set br0 up");
        hosts.ip(0, "addr add 10.0.0.1/24 dev br0");
        for i in 0..servers {
            let pid = hosts.holders[i + 1].id();
            hosts.ip(
                0,
                &format!("link add v{i} type veth peer name eth0 netns {pid}"),
            );
            hosts.ip(0, &format!("link set v{i} master br0 up"));
            hosts.ip(i + 1, "link set lo up");
            hosts.ip(
                i + 1,
                &format!("addr add {}/24 dev eth0", Hosts::server_ip(i)),
            );
            hosts.ip(i + 1, "link set eth0 up");
        }
        hosts
    }

    /// Server `i`'s address.
    pub fn server_ip(i: usize) -> String {
        assert!(i < 250, "at most 250 server hosts");
        format!("10.0.0.{}", i + 2)
    }

    /// Runs `ip ARGS` in host `h`'s namespace (0: the clients'), and fails the test if
    /// it fails.
    fn ip(&self, h: usize, args: &str) {
        let mut cmd = Command::new("ip");
        cmd.args(args.split_whitespace());
        let fd = self.ns[h].as_raw_fd();
        // SAFETY: setns in the child before exec (see `enter`).
        unsafe {
            cmd.pre_exec(move || enter(fd));
        }
        let out = cmd.output().expect("cannot run ip");
        assert!(
            out.status.success(),
            "ip {args} (host {h}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Moves the calling thread into the clients' host: the clients it makes, the
    /// threads and processes it starts from now on, are there. Dropping the hosts on
    /// this thread brings it back.
    pub fn enter_clients(&self) {
        let mine = File::open("/proc/thread-self/ns/net").unwrap();
        enter(self.ns[0].as_raw_fd()).expect("cannot enter the clients' host");
        *self.left.lock().unwrap() = Some((mine, std::thread::current().id()));
    }

    /// Makes `cmd` start its process on server `i`'s host.
    pub fn on_server(&self, i: usize, cmd: &mut Command) {
        let fd = self.ns[i + 1].as_raw_fd();
        // SAFETY: setns in the child before exec (see `enter`).
        unsafe {
            cmd.pre_exec(move || enter(fd));
        }
    }

    /// Cuts server `i` off: nothing it sends arrives, nothing sent to it arrives.
    pub fn cut(&self, i: usize) {
        self.ip(0, &format!("link set v{i} down"));
    }

    /// Links server `i` again.
    pub fn heal(&self, i: usize) {
        self.ip(0, &format!("link set v{i} up"));
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        if let Some((ns, thread)) = self.left.lock().unwrap().take() {
            if thread == std::thread::current().id() {
                let _ = enter(ns.as_raw_fd());
            }
        }
        for h in &mut self.holders {
            let _ = h.kill();
            let _ = h.wait();
        }
    }
}
