//! The simulated network: byte streams between nodes of one process, with delays the
//! seed picks, partitions, and servers that go down. It implements the transport seam
//! (`pvfs_transport::Transport`), so servers and clients run their real connection
//! code over it — handshakes, frames, MACs, retries.
//!
//! A connection is two pipes. A write is delivered after a latency the run's random
//! numbers pick, never before an earlier write of the same pipe (a stream keeps its
//! order, as TCP does); writes never block. Now and then a write stalls (a lost
//! segment waiting for its retransmission): it and everything behind it on its pipe
//! arrive up to [`Latency::stall_max`] late, so messages on other connections overtake
//! it — between one client's requests to two servers, or a retry on a fresh connection
//! and the original on the stalled one. Cutting a pipe (a partition, a server that
//! went down, a single connection reset by [`SimNet::reset_one`]) fails both ends at
//! once and drops what was in flight: reads and writes on it fail, as on a reset
//! connection, and a connect to a node that is down or cut off is refused.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use pvfs_transport::{Conn, Listener, Transport, TransportError};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

use crate::rng::Rng;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How the network delays bytes.
#[derive(Clone, Copy, Debug)]
pub struct Latency {
    /// Least delay of a write.
    pub min: Duration,
    /// Most delay of a write.
    pub max: Duration,
    /// Chance that a write stalls.
    pub stall_chance: f64,
    /// Most extra delay of a stalled write (kept below the clients' request timeout,
    /// so a stall reorders messages rather than abandoning requests).
    pub stall_max: Duration,
}

#[derive(Default)]
struct PipeState {
    chunks: VecDeque<(Instant, Vec<u8>)>,
    /// Bytes of the front chunk already read.
    read: usize,
    /// When the last write is delivered (the next is never earlier).
    last: Option<Instant>,
    writer_closed: bool,
    reader_gone: bool,
    cut: bool,
    reader: Option<Waker>,
}

/// One direction of a connection.
#[derive(Default)]
struct Pipe(Mutex<PipeState>);

impl Pipe {
    fn cut(&self) {
        let mut st = lock(&self.0);
        st.cut = true;
        if let Some(w) = st.reader.take() {
            w.wake();
        }
    }
}

struct PipeReader {
    pipe: Arc<Pipe>,
    sleep: Option<Pin<Box<Sleep>>>,
}

struct PipeWriter {
    pipe: Arc<Pipe>,
    net: Arc<NetState>,
    /// The nodes at the link's ends, whose slowness ([`SimNet::slow`]) every write
    /// takes on.
    ends: Arc<(String, String)>,
}

fn reset() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "the simulated link was cut")
}

impl AsyncRead for PipeReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let due = {
                let mut st = lock(&self.pipe.0);
                if st.cut {
                    return Poll::Ready(Err(reset()));
                }
                let now = Instant::now();
                let read = st.read;
                match st.chunks.front() {
                    Some((at, data)) if *at <= now => {
                        let n = buf.remaining().min(data.len() - read);
                        buf.put_slice(&data[read..read + n]);
                        if read + n == data.len() {
                            st.chunks.pop_front();
                            st.read = 0;
                        } else {
                            st.read = read + n;
                        }
                        return Poll::Ready(Ok(()));
                    }
                    Some((at, _)) => {
                        let at = *at;
                        st.reader = Some(cx.waker().clone());
                        at
                    }
                    None if st.writer_closed => return Poll::Ready(Ok(())),
                    None => {
                        st.reader = Some(cx.waker().clone());
                        return Poll::Pending;
                    }
                }
            };
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
            if sleep.deadline() != due {
                sleep.as_mut().reset(due);
            }
            match sleep.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.sleep = None;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Drop for PipeReader {
    fn drop(&mut self) {
        lock(&self.pipe.0).reader_gone = true;
    }
}

impl AsyncWrite for PipeWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let delay = self.net.delay() + self.net.slowness(&self.ends);
        let mut st = lock(&self.pipe.0);
        if st.cut || st.reader_gone {
            return Poll::Ready(Err(reset()));
        }
        let mut at = Instant::now() + delay;
        if let Some(last) = st.last {
            at = at.max(last);
        }
        st.last = Some(at);
        st.chunks.push_back((at, data.to_vec()));
        if let Some(w) = st.reader.take() {
            w.wake();
        }
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.close();
        Poll::Ready(Ok(()))
    }
}

impl PipeWriter {
    fn close(&self) {
        let mut st = lock(&self.pipe.0);
        st.writer_closed = true;
        if let Some(w) = st.reader.take() {
            w.wake();
        }
    }
}

impl Drop for PipeWriter {
    fn drop(&mut self) {
        self.close();
    }
}

/// A connection's two pipes, and the nodes at its ends.
struct Link {
    ends: (String, String),
    pipes: [Weak<Pipe>; 2],
}

#[derive(Default)]
struct Topology {
    /// Listening nodes by address: their name and where new connections go.
    listeners: BTreeMap<String, (String, mpsc::UnboundedSender<Conn>)>,
    /// Nodes that are down (crashed servers).
    down: BTreeSet<String>,
    /// Pairs of nodes that cannot reach each other (in name order).
    cut: BTreeSet<(String, String)>,
    links: Vec<Link>,
    connections: u64,
}

/// What all nodes of one simulated network share.
pub struct NetState {
    rng: Rng,
    /// Draws whether a write stalls: a stream of its own, so that runs without
    /// stalls draw the same delays as before stalls existed (seeds keep their runs).
    stall_rng: Rng,
    /// Writes that stalled.
    stalls: std::sync::atomic::AtomicU64,
    /// Whether writes no longer stall (the run's quiet end).
    calm: std::sync::atomic::AtomicBool,
    latency: Latency,
    topo: Mutex<Topology>,
    /// Extra delay of every write on a link to or from a node ([`SimNet::slow`]).
    slow: Mutex<BTreeMap<String, Duration>>,
}

impl NetState {
    fn delay(&self) -> Duration {
        let min = self.latency.min.as_micros() as u64;
        let max = self.latency.max.as_micros() as u64;
        let mut d = Duration::from_micros(self.rng.range(min, max + 1));
        let calm = self.calm.load(std::sync::atomic::Ordering::Relaxed);
        if !calm
            && self.latency.stall_chance > 0.0
            && self.stall_rng.chance(self.latency.stall_chance)
        {
            let stall = self.latency.stall_max.as_micros() as u64;
            d += Duration::from_micros(self.stall_rng.range(stall / 10, stall + 1));
            self.stalls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        d
    }
}

impl NetState {
    /// The extra delay of a write between `ends`.
    fn slowness(&self, ends: &(String, String)) -> Duration {
        let slow = lock(&self.slow);
        if slow.is_empty() {
            return Duration::ZERO;
        }
        let of = |node: &str| slow.get(node).copied().unwrap_or_default();
        of(&ends.0) + of(&ends.1)
    }
}

fn pair(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_string(), b.to_string())
    } else {
        (b.to_string(), a.to_string())
    }
}

/// The simulated network of one run.
#[derive(Clone)]
pub struct SimNet(Arc<NetState>);

impl SimNet {
    /// A network whose writes take `latency`, drawn from `rng` (stalls from
    /// `stall_rng`).
    pub fn new(rng: Rng, stall_rng: Rng, latency: Latency) -> SimNet {
        SimNet(Arc::new(NetState {
            rng,
            stall_rng,
            stalls: Default::default(),
            calm: Default::default(),
            latency,
            topo: Mutex::new(Topology::default()),
            slow: Mutex::default(),
        }))
    }

    /// The transport node `name` connects with.
    pub fn node(&self, name: &str) -> Arc<dyn Transport> {
        Arc::new(Node {
            net: self.0.clone(),
            name: name.to_string(),
        })
    }

    /// Node `name` listens on `addr` (replacing what listened there): the listener a
    /// server serves.
    pub fn listen(&self, name: &str, addr: &str) -> Box<dyn Listener> {
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.0.topo)
            .listeners
            .insert(addr.to_string(), (name.to_string(), tx));
        Box::new(SimListener {
            rx,
            addr: addr.to_string(),
        })
    }

    /// Node `name` goes down (a crash): every connection it has breaks, connecting to
    /// it is refused, and its listener gets nothing more.
    pub fn down(&self, name: &str) {
        let mut topo = lock(&self.0.topo);
        topo.down.insert(name.to_string());
        topo.listeners.retain(|_, (n, _)| n != name);
        cut_links(&mut topo, |(a, b)| a == name || b == name);
    }

    /// Node `name` is up again (it listens anew with [`SimNet::listen`]).
    pub fn up(&self, name: &str) {
        lock(&self.0.topo).down.remove(name);
    }

    /// Nodes `a` and `b` cannot reach each other until [`SimNet::heal`]: their
    /// connections break, new ones are refused.
    pub fn partition(&self, a: &str, b: &str) {
        let mut topo = lock(&self.0.topo);
        let p = pair(a, b);
        cut_links(&mut topo, |ends| pair(&ends.0, &ends.1) == p);
        topo.cut.insert(p);
    }

    /// One live connection, chosen by `pick` among them, is reset (as by a middlebox
    /// or a peer's kernel): what it had in flight either way is lost and both ends see
    /// it break; the nodes stay reachable. Its ends, if there was one.
    pub fn reset_one(&self, pick: impl FnOnce(usize) -> usize) -> Option<(String, String)> {
        let mut topo = lock(&self.0.topo);
        topo.links
            .retain(|l| l.pipes.iter().any(|p| p.strong_count() > 0));
        if topo.links.is_empty() {
            return None;
        }
        let k = pick(topo.links.len()).min(topo.links.len() - 1);
        let link = topo.links.remove(k);
        for p in link.pipes.iter().filter_map(Weak::upgrade) {
            p.cut();
        }
        Some(link.ends)
    }

    /// Writes stall no more (what is stalled still arrives late).
    pub fn calm(&self) {
        self.0
            .calm
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// From now on every write to or from node `name` takes `extra` longer: a client
    /// on a far link, whose steps a test interleaves with another's (a race played
    /// out in a fixed order).
    pub fn slow(&self, name: &str, extra: Duration) {
        lock(&self.0.slow).insert(name.to_string(), extra);
    }

    /// Every partition ends.
    pub fn heal(&self) {
        lock(&self.0.topo).cut.clear();
    }

    /// Writes that stalled so far.
    pub fn stalls(&self) -> u64 {
        self.0.stalls.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Connections made so far.
    pub fn connections(&self) -> u64 {
        lock(&self.0.topo).connections
    }
}

fn cut_links(topo: &mut Topology, hit: impl Fn(&(String, String)) -> bool) {
    topo.links.retain(|l| {
        let alive = l.pipes.iter().any(|p| p.strong_count() > 0);
        if alive && hit(&l.ends) {
            for p in l.pipes.iter().filter_map(Weak::upgrade) {
                p.cut();
            }
            return false;
        }
        alive
    });
}

/// One node's side of the network.
struct Node {
    net: Arc<NetState>,
    name: String,
}

impl Transport for Node {
    fn connect<'a>(
        &'a self,
        addr: &'a str,
        _timeout: Duration,
    ) -> pvfs_transport::stream::BoxFuture<'a, Result<Conn, TransportError>> {
        Box::pin(async move {
            // A connect costs a round trip, answered or refused.
            tokio::time::sleep(self.net.delay() * 2).await;
            let refused = |why: &str| TransportError::Connect {
                addr: addr.to_string(),
                source: io::Error::new(io::ErrorKind::ConnectionRefused, why.to_string()),
            };
            let mut topo = lock(&self.net.topo);
            let Some((server, tx)) = topo.listeners.get(addr).cloned() else {
                return Err(refused("nothing listens there (the server is down)"));
            };
            if topo.down.contains(&server) || topo.down.contains(&self.name) {
                return Err(refused("the server is down"));
            }
            if topo.cut.contains(&pair(&self.name, &server)) {
                return Err(refused("a partition separates the nodes"));
            }
            topo.connections += 1;
            let n = topo.connections;
            let ends = Arc::new((self.name.clone(), server.clone()));
            let up = Arc::new(Pipe::default());
            let down = Arc::new(Pipe::default());
            topo.links.push(Link {
                ends: (self.name.clone(), server.clone()),
                pipes: [Arc::downgrade(&up), Arc::downgrade(&down)],
            });
            let ours = Conn {
                read: Box::new(PipeReader {
                    pipe: down.clone(),
                    sleep: None,
                }),
                write: Box::new(PipeWriter {
                    pipe: up.clone(),
                    net: self.net.clone(),
                    ends: ends.clone(),
                }),
                peer: addr.to_string(),
                fd: None,
            };
            let theirs = Conn {
                read: Box::new(PipeReader {
                    pipe: up,
                    sleep: None,
                }),
                write: Box::new(PipeWriter {
                    pipe: down,
                    net: self.net.clone(),
                    ends: ends.clone(),
                }),
                peer: format!("127.0.{}.{}:{}", n >> 8 & 0xff, n & 0xff, 1024 + n % 60000),
                fd: None,
            };
            if tx.send(theirs).is_err() {
                return Err(refused("the server stopped listening"));
            }
            Ok(ours)
        })
    }

    fn listen<'a>(
        &'a self,
        addr: &'a str,
    ) -> pvfs_transport::stream::BoxFuture<'a, Result<Box<dyn Listener>, TransportError>> {
        let net = SimNet(self.net.clone());
        let name = self.name.clone();
        Box::pin(async move { Ok(net.listen(&name, addr)) })
    }
}

/// Where a simulated server accepts connections.
struct SimListener {
    rx: mpsc::UnboundedReceiver<Conn>,
    addr: String,
}

impl Listener for SimListener {
    fn accept(&mut self) -> pvfs_transport::stream::BoxFuture<'_, io::Result<Conn>> {
        Box::pin(async move {
            match self.rx.recv().await {
                Some(c) => Ok(c),
                None => std::future::pending().await,
            }
        })
    }

    fn local_addr(&self) -> String {
        self.addr.clone()
    }
}
