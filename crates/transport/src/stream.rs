//! Byte-stream transports behind one small trait (the communication abstraction of the
//! PVFS paper, Carns et al., 2000): TCP for the network, Unix-domain sockets for
//! co-located processes. Servers and clients only see [`Conn`] and [`Listener`], so a
//! faster transport can be added without touching them.

use std::future::Future;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::TransportError;

/// The receiving half of a connection.
pub type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
/// The sending half of a connection.
pub type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;
/// A boxed future, for object-safe async trait methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An established connection, split into halves that can be used from two tasks.
pub struct Conn {
    /// Bytes from the peer.
    pub read: BoxRead,
    /// Bytes to the peer.
    pub write: BoxWrite,
    /// The peer's address, for messages.
    pub peer: String,
    /// The socket's descriptor, when the transport has one (enables `sendfile`).
    pub fd: Option<std::os::fd::RawFd>,
}

/// Accepts incoming connections.
pub trait Listener: Send {
    /// Waits for the next connection.
    fn accept(&mut self) -> BoxFuture<'_, std::io::Result<Conn>>;
    /// The address actually bound (with the real port when 0 was asked for).
    fn local_addr(&self) -> String;
}

/// Makes and accepts connections for one kind of address.
pub trait Transport: Send + Sync + 'static {
    /// Connects to `addr`, failing after `timeout`.
    fn connect<'a>(
        &'a self,
        addr: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Conn, TransportError>>;
    /// Listens on `addr`.
    fn listen<'a>(
        &'a self,
        addr: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn Listener>, TransportError>>;
}

/// Builds a [`Conn`] from the halves of a split stream.
fn conn(
    read: impl AsyncRead + Send + Unpin + 'static,
    write: impl AsyncWrite + Send + Unpin + 'static,
    peer: String,
    fd: std::os::fd::RawFd,
) -> Conn {
    Conn {
        read: Box::new(read),
        write: Box::new(write),
        peer,
        fd: Some(fd),
    }
}

/// Runs a connect future with a deadline, naming the address in failures.
async fn connect_within<S>(
    addr: &str,
    timeout: Duration,
    connect: impl Future<Output = std::io::Result<S>>,
) -> Result<S, TransportError> {
    tokio::time::timeout(timeout, connect)
        .await
        .map_err(|_| TransportError::Timeout {
            what: format!("connecting to {addr}"),
        })?
        .map_err(|e| TransportError::Connect {
            addr: addr.to_string(),
            source: e,
        })
}

/// Socket buffer size asked of the kernel for bulk transfers.
const SOCKET_BUFFER: usize = 4 << 20;

fn tune_tcp(stream: &TcpStream) {
    // Small control messages must not wait for Nagle; failures here are harmless.
    let _ = stream.set_nodelay(true);
    let sock = socket_ref(stream);
    let _ = sock.set_buffers(SOCKET_BUFFER);
}

/// Minimal setsockopt helper (the std API has no buffer-size setters).
struct SockRef(std::os::fd::RawFd);

fn socket_ref(stream: &TcpStream) -> SockRef {
    SockRef(stream.as_raw_fd())
}

impl SockRef {
    fn set_buffers(&self, size: usize) -> std::io::Result<()> {
        let val: libc::c_int = size.min(i32::MAX as usize) as libc::c_int;
        for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
            // SAFETY: fd is a live socket owned by the caller for the duration of the
            // call; the option value points to a c_int of the size we pass.
            let rc = unsafe {
                libc::setsockopt(
                    self.0,
                    libc::SOL_SOCKET,
                    opt,
                    (&val as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// TCP (the default transport); addresses are `host:port`.
pub struct TcpTransport;

struct TcpListen(TcpListener);

impl Listener for TcpListen {
    fn accept(&mut self) -> BoxFuture<'_, std::io::Result<Conn>> {
        Box::pin(async move {
            let (stream, peer) = self.0.accept().await?;
            tune_tcp(&stream);
            let fd = stream.as_raw_fd();
            let (r, w) = stream.into_split();
            Ok(conn(r, w, peer.to_string(), fd))
        })
    }
    fn local_addr(&self) -> String {
        self.0
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default()
    }
}

impl Transport for TcpTransport {
    fn connect<'a>(
        &'a self,
        addr: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Conn, TransportError>> {
        Box::pin(async move {
            let stream = connect_within(addr, timeout, TcpStream::connect(addr)).await?;
            tune_tcp(&stream);
            let fd = stream.as_raw_fd();
            let (r, w) = stream.into_split();
            Ok(conn(r, w, addr.to_string(), fd))
        })
    }

    fn listen<'a>(
        &'a self,
        addr: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn Listener>, TransportError>> {
        Box::pin(async move {
            let l = TcpListener::bind(addr)
                .await
                .map_err(|e| TransportError::Listen {
                    addr: addr.to_string(),
                    source: e,
                })?;
            Ok(Box::new(TcpListen(l)) as Box<dyn Listener>)
        })
    }
}

/// Unix-domain stream sockets; addresses are `unix:/path/to/socket`.
pub struct UnixTransport;

struct UnixListen(UnixListener, String);

impl Listener for UnixListen {
    fn accept(&mut self) -> BoxFuture<'_, std::io::Result<Conn>> {
        Box::pin(async move {
            let (stream, _) = self.0.accept().await?;
            let fd = stream.as_raw_fd();
            let (r, w) = stream.into_split();
            Ok(conn(r, w, format!("unix:{}", self.1), fd))
        })
    }
    fn local_addr(&self) -> String {
        format!("unix:{}", self.1)
    }
}

impl Transport for UnixTransport {
    fn connect<'a>(
        &'a self,
        addr: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Conn, TransportError>> {
        Box::pin(async move {
            let path = addr.strip_prefix("unix:").unwrap_or(addr);
            let stream = connect_within(addr, timeout, UnixStream::connect(path)).await?;
            let fd = stream.as_raw_fd();
            let (r, w) = stream.into_split();
            Ok(conn(r, w, addr.to_string(), fd))
        })
    }

    fn listen<'a>(
        &'a self,
        addr: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn Listener>, TransportError>> {
        Box::pin(async move {
            let path = addr.strip_prefix("unix:").unwrap_or(addr).to_string();
            // A stale socket file from a previous run would make bind fail.
            let _ = std::fs::remove_file(&path);
            let l = UnixListener::bind(&path).map_err(|e| TransportError::Listen {
                addr: addr.to_string(),
                source: e,
            })?;
            Ok(Box::new(UnixListen(l, path)) as Box<dyn Listener>)
        })
    }
}

/// Picks the transport from the address: `unix:PATH` is a Unix socket, anything else TCP.
pub struct AutoTransport;

impl Transport for AutoTransport {
    fn connect<'a>(
        &'a self,
        addr: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Conn, TransportError>> {
        if addr.starts_with("unix:") {
            UnixTransport.connect(addr, timeout)
        } else {
            TcpTransport.connect(addr, timeout)
        }
    }

    fn listen<'a>(
        &'a self,
        addr: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn Listener>, TransportError>> {
        if addr.starts_with("unix:") {
            UnixTransport.listen(addr)
        } else {
            TcpTransport.listen(addr)
        }
    }
}
